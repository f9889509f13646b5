"""dsa_kvcalc.output on real files, links, a FIFO, a socket, devices and signals: nothing is written unless asked,
then atomically, and never over an input, a link, a device or a file's permissions."""

import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from dsa_kvcalc.output import OutputError, check_targets, write

ROOT = Path(__file__).parent.parent
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
CHILD_ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def hidden(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(".")]


def raised(action) -> str:
    with pytest.raises(OutputError) as error:
        action()
    return str(error.value)


def test_new_files_get_the_umask_mode_as_open_would(tmp_path):
    umask = os.umask(0o027)
    try:
        write(["a,b\n", "1,2\n"], tmp_path / "out.csv")
        write([b"\x89PNG", b"..."], tmp_path / "out.png", "--plot", binary=True)
    finally:
        os.umask(umask)
    assert (tmp_path / "out.csv").read_text() == "a,b\n1,2\n"
    assert (tmp_path / "out.png").read_bytes() == b"\x89PNG..."
    assert {stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()} == {0o640}


@pytest.mark.parametrize("mode", [0o600, 0o751])  # neither mkstemp's 0600 nor the umask's 0644 for both
def test_an_existing_file_keeps_its_mode_and_owner(tmp_path, mode):
    out = tmp_path / "out.csv"
    out.write_text("old")
    out.chmod(mode)
    owner = (65534, 65534) if os.geteuid() == 0 else (os.getuid(), os.getgid())  # only root can give a file away
    os.chown(out, *owner)
    write(["new"], out)
    assert out.read_text() == "new" and stat.S_IMODE(out.stat().st_mode) == mode
    assert (out.stat().st_uid, out.stat().st_gid) == owner and hidden(tmp_path) == []


@pytest.mark.parametrize("exists", [True, False])
def test_a_link_is_kept_and_its_target_written(tmp_path, exists):
    real = tmp_path / "data" / "out.csv"
    real.parent.mkdir()
    if exists:
        real.write_text("old")
    link = tmp_path / "link.csv"
    link.symlink_to("data/out.csv")
    write(["new"], link)
    assert link.is_symlink() and os.readlink(link) == "data/out.csv"
    assert real.read_text() == "new"
    assert hidden(tmp_path) == hidden(real.parent) == []


def test_a_fifo_is_written_directly(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    write(["a", "b"], fifo)
    reader.join(10)
    assert got == ["ab"]
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and os.listdir(tmp_path) == ["pipe"]


def test_a_fifo_nobody_reads_is_an_error_not_a_hang(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert raised(lambda: write(["x"], fifo)) == f"--output: cannot write {fifo}: no process reads this FIFO"
    assert os.listdir(tmp_path) == ["pipe"]


def test_a_fifo_whose_reader_opens_it_second_is_written(tmp_path):
    # `dsa-kvcalc ... -o fifo & reader < fifo`: the writer may open the FIFO before its reader does.
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Timer(0.3, lambda: got.append(fifo.read_text()))
    reader.start()
    write(["a", "b"], fifo)
    reader.join(10)
    assert got == ["ab"]


def test_a_socket_is_an_error_not_replaced(tmp_path):
    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        assert raised(lambda: write(["x"], path)) == f"--output: cannot write {path}: No such device or address"
    assert stat.S_ISSOCK(path.lstat().st_mode) and os.listdir(tmp_path) == ["sock"]


@pytest.mark.parametrize("device, error", [("/dev/null", None), ("/dev/full", "No space left on device")])
def test_a_device_is_written_in_place(device, error):
    if not os.path.exists(device):
        pytest.skip(f"no {device}")
    if error:
        assert raised(lambda: write(["x" * 100_000], Path(device))) == f"--output: cannot write {device}: {error}"
    else:
        write(["x" * 100_000], Path(device))
    assert stat.S_ISCHR(os.lstat(device).st_mode)


WRITE_STDOUT = [sys.executable, "-c",
                "import pathlib, dsa_kvcalc.output as o; o.write(['hi\\n'], pathlib.Path('/dev/stdout'))"]


@pytest.mark.parametrize("stdout", ["pipe", "appended file"])
def test_dev_stdout_is_written_through_the_descriptor(tmp_path, stdout):
    if not os.path.islink("/dev/stdout"):
        pytest.skip("no /dev/stdout link")
    if stdout == "pipe":
        child = subprocess.run(WRITE_STDOUT, env=CHILD_ENV, capture_output=True, text=True)
        assert (child.returncode, child.stdout) == (0, "hi\n"), child.stderr
    else:  # dsa-kvcalc ... -o /dev/stdout >> log: appended to, not replaced
        log = tmp_path / "log"
        log.write_text("kept\n")
        with open(log, "a") as handle:
            subprocess.run(WRITE_STDOUT, env=CHILD_ENV, stdout=handle, check=True)
        assert log.read_text() == "kept\nhi\n" and os.listdir(tmp_path) == ["log"]
    assert os.path.islink("/dev/stdout")


@pytest.mark.parametrize("spelling", ["same path", "symlink", "hard link"])
def test_an_input_is_refused(tmp_path, spelling):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("model: x\n")
    check_targets({"--output": tmp_path / "out.csv", "--plot": None}, [recipe])  # another file is fine
    assert os.listdir(tmp_path) == ["recipe.yaml"]  # and checking creates nothing
    target = {"same path": recipe, "symlink": tmp_path / "link.yaml", "hard link": tmp_path / "hard.yaml"}[spelling]
    if spelling == "symlink":
        target.symlink_to(recipe)
    if spelling == "hard link":
        os.link(recipe, target)
    message = raised(lambda: check_targets({"--output": target, "--plot": None}, [recipe]))
    assert message == f"--output: {target} is an input of this command; refusing to overwrite it"
    assert recipe.read_text() == "model: x\n"


@pytest.mark.parametrize("exists", [True, False])
def test_two_outputs_on_one_file_are_refused(tmp_path, exists):
    csv, link = tmp_path / "a.csv", tmp_path / "b.csv"
    if exists:
        csv.write_text("old")
    link.symlink_to("a.csv")
    message = raised(lambda: check_targets({"--output": csv, "--plot": link}, []))
    assert message == f"--plot: {link} is also the target of --output; refusing to write it twice"
    assert csv.exists() == exists


@pytest.mark.parametrize("name, problem", [
    ("missing/out.png", "cannot write {t}: No such file or directory (folder {tmp}/missing does not exist)"),
    ("folder", "{t} is a folder"),
    ("file.txt/out.png", "cannot write {t}: Not a directory ({tmp}/file.txt is not a folder)"),
])
def test_a_bad_target_is_one_error_and_nothing_is_created(tmp_path, name, problem):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file.txt").write_text("")
    before = sorted(tmp_path.rglob("*"))
    target = tmp_path / name
    expected = "--plot: " + problem.format(t=target, tmp=tmp_path)
    assert raised(lambda: check_targets({"--output": tmp_path / "ok.csv", "--plot": target}, [])) == expected
    assert raised(lambda: write([b"png"], target, "--plot", binary=True)) == expected
    assert sorted(tmp_path.rglob("*")) == before


def test_a_read_only_folder_is_one_error_and_nothing_is_created():
    folder = Path(os.path.realpath(tempfile.mkdtemp()))  # in /tmp, where nobody can reach it, unlike root's tmp_path
    folder.chmod(0o555)
    target = folder / "out.csv"
    os.seteuid(65534 if os.getuid() == 0 else os.getuid())  # root may write anywhere: act as nobody
    try:
        checked = raised(lambda: check_targets({"--output": target}, []))
        written = raised(lambda: write(["x"], target))
    finally:
        os.seteuid(os.getuid())
    assert checked == written == f"--output: cannot write {target}: Permission denied (folder {folder} is not writable)"
    folder.rmdir()  # fails unless nothing was created


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to own files that another user then targets")
def test_a_file_the_user_may_not_write_or_keep_is_refused_and_left_as_it_was():
    folder = Path(os.path.realpath(tempfile.mkdtemp()))
    folder.chmod(0o777)  # anybody may create and rename here: only the file's own rights protect it
    locked, shared = folder / "locked", folder / "shared"
    for path, mode in ((locked, 0o644), (shared, 0o666)):
        path.write_text("root's")
        path.chmod(mode)
    os.seteuid(65534)
    try:
        problems = [raised(lambda: write(["x"], path)) for path in (locked, shared)]
    finally:
        os.seteuid(os.getuid())
    assert problems == [f"--output: cannot write {locked}: Permission denied (the file is not writable)",
                        f"--output: cannot write {shared}: it belongs to another user or group; replacing it would "
                        f"change its owner"]
    for path, mode in ((locked, 0o644), (shared, 0o666)):
        status = path.stat()
        assert (path.read_text(), status.st_uid, stat.S_IMODE(status.st_mode)) == ("root's", 0, mode)
    assert sorted(os.listdir(folder)) == ["locked", "shared"]


def test_a_failing_generator_leaves_the_old_file_and_no_temporary(tmp_path):
    out = tmp_path / "out.csv"
    out.write_text("old")
    handlers = [signal.getsignal(s) for s in SIGNALS]

    def rows():
        yield "a\n"
        assert hidden(tmp_path)  # the temporary exists while writing
        raise ValueError("bad row")

    with pytest.raises(ValueError, match="bad row"):
        write(rows(), out)
    assert out.read_text() == "old" and hidden(tmp_path) == []
    assert [signal.getsignal(s) for s in SIGNALS] == handlers


SLOW_SWEEP = """import sys, time, pathlib, dsa_kvcalc.output
def rows():
    yield "header\\n"
    print("writing", flush=True)
    while True:
        yield "row\\n" * 1000
        time.sleep(0.01)
dsa_kvcalc.output.write(rows(), pathlib.Path(sys.argv[1]))"""


@pytest.mark.parametrize("signum", SIGNALS)
def test_a_signal_removes_the_temporary_and_exits_128_plus_signum(tmp_path, signum):
    out = tmp_path / "sweep.csv"
    out.write_text("old")
    child = subprocess.Popen([sys.executable, "-c", SLOW_SWEEP, out], env=CHILD_ENV, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "writing\n"
    assert hidden(tmp_path)  # mid-write: the temporary is there
    child.send_signal(signum)
    assert child.wait(20) == 128 + signum
    assert hidden(tmp_path) == [] and out.read_text() == "old"
