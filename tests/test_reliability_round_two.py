"""Issue 16, reliability round two. Each class of the issue has property tests that generate its cases: stream states,
special files as input, versions too long to convert, verify without a usable torch or GPU, outputs (attributes, long
names, several at once, signals, a removed working folder, odd names), calibrate --after and --vary meaning what
they say, memory that stays flat whatever fails. Outcomes are checked against what the code did not produce: exit
codes, a one-line stderr, files byte-identical or written in full."""

import errno
import io
import json
import os
import re
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
import tracemalloc
import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import LOGS, ROOT, SEED, runner
from dsa_kvcalc import engine as engines
from dsa_kvcalc import inputs
from dsa_kvcalc.cli import app, console_chunks, main
from dsa_kvcalc.output import TERMINATING
from dsa_kvcalc.inputs import RecipeLoader
from dsa_kvcalc.keys import RecipeError
from dsa_kvcalc.values import read_values
from dsa_kvcalc.render import sweep as sweep_render
from dsa_kvcalc.sweep import parse_varies

RTX = LOGS / "deepseek-v4-flash-2xrtxpro6000-tp2-stock-v0.25.0.log"
CHILD_ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
SECONDS = 5
FEW = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
SOME = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
NEEDED = {"num_hidden_layers": 61, "hidden_size": 7168, "index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048,
          "max_position_embeddings": 32768}
ACCENTED = "Modèle-DSA-façon-ü"
FIGURE = re.compile(r"\b\d{1,3}(?:,\d{3})+\b")


def cli(*args):
    """The command in process, as typer runs it: never a traceback, never more than a few seconds."""
    started = time.process_time()  # CPU: a loaded machine does not fail a run that works
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert time.process_time() - started < SECONDS, args
    return result


def one_line(text: str, start: str = "error: ") -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start), text
    return lines[0]


def hidden(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(".")]


@pytest.fixture(scope="module")
def place(tmp_path_factory) -> Path:
    """A folder for the module: a recipe of a local model with a non-ASCII name, special files, an existing output."""
    folder = tmp_path_factory.mktemp("round-two")
    (folder / "checkpoint").mkdir()
    (folder / "checkpoint" / "config.json").write_text(json.dumps(NEEDED | {"_name_or_path": ACCENTED}))
    (folder / "accented.yaml").write_text("model: checkpoint\ngpu: H200\ntensor-parallel-size: 8\n")
    os.mkfifo(folder / "fifo")
    (folder / "link-to-fifo").symlink_to("fifo")
    (folder / "a-folder").mkdir()
    with open(folder / "sparse", "wb") as file:
        file.truncate(100 << 20)  # over every reader's limit, and no disk taken
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(folder / "socket"))
    yield folder
    listener.close()


# Stream states: closed, full, gone, closed while running, an encoding that cannot hold the text; any width ----------

class Refusing(io.RawIOBase):
    """A descriptor whose every write fails with one errno."""

    def __init__(self, number: int):
        self.number = number

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        raise OSError(self.number, os.strerror(self.number))


def stream(state: str):
    """(what sys.stdout or sys.stderr is in that state, a function giving what it received)."""
    if state == "closed":
        return None, lambda: ""
    if state in ("full", "gone"):
        return io.TextIOWrapper(Refusing(errno.ENOSPC if state == "full" else errno.EPIPE)), lambda: ""
    if state == "closed while running":
        closed = io.TextIOWrapper(io.BytesIO())
        closed.close()
        return closed, lambda: ""
    received = io.BytesIO()
    text = io.TextIOWrapper(received, encoding="ascii" if state == "ascii" else "utf-8")

    def read() -> str:
        text.flush()
        return received.getvalue().decode("ascii" if state == "ascii" else "utf-8")  # ascii: fails on anything else

    return text, read


STREAM_COMMANDS = {
    "plan table": ["plan", SEED], "plan json": ["plan", SEED, "-f", "json"], "plan csv": ["plan", SEED, "-f", "csv"],
    "plan markdown": ["plan", SEED, "-f", "markdown"], "plan --explain": ["plan", SEED, "--explain"],
    "plan of a non-ASCII model": ["plan", "{place}/accented.yaml"], "plan -o": ["plan", SEED, "-o", "{place}/out.txt"],
    "models": ["models"], "gpus": ["gpus"], "schema": ["schema"],
    "sweep table": ["sweep", SEED, "--vary", "max-num-seqs=64,128"],
    "sweep with a failing point": ["sweep", SEED, "--vary", "max-num-seqs=0,64", "-f", "csv"],
    "recommend": ["recommend", SEED, "--target-concurrency", 64, "--min-kv-tokens", 1000],
    "calibrate": ["calibrate", RTX, "--set", "gpu=B200"], "calibrate json": ["calibrate", RTX, "--set", "gpu=B200",
                                                                            "-f", "json"],
    "verify": ["verify", "--gpu"], "help": ["plan", "--help"], "no arguments": [], "usage error": ["plan", "--bogus"],
    "a missing recipe": ["plan", "{place}/missing.yaml"],
}
STDOUT_STATES = ["ok", "ascii", "closed", "full", "gone", "closed while running"]
STDERR_STATES = ["ok", "ascii", "closed", "full", "closed while running"]
REFERENCES: dict[str, tuple[int, str, str]] = {}


def console_script(args: list[str], out_state: str, err_state: str, columns: int) -> tuple[int, str, str]:
    """dsa_kvcalc.cli.main, the console script, with stdout and stderr in these states: (exit code, stdout, stderr)."""
    (out, read_out), (err, read_err) = stream(out_state), stream(err_state)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stdout", out)
        patch.setattr(sys, "stderr", err)
        patch.setenv("COLUMNS", str(columns))
        with pytest.raises(SystemExit) as exited:
            main(args)
    return exited.value.code, read_out(), read_err()


def reference(name: str, args: list[str]) -> tuple[int, str, str]:
    """The command with working streams, 250 columns wide."""
    if name not in REFERENCES:
        REFERENCES[name] = console_script(args, "ok", "ok", 250)
    return REFERENCES[name]


@SOME
@given(st.sampled_from(sorted(STREAM_COMMANDS)), st.sampled_from(STDOUT_STATES), st.sampled_from(STDERR_STATES),
       st.one_of(st.sampled_from([0, 1, 2, 10 ** 6]), st.integers(0, 10 ** 6)))
def test_every_stream_state_and_width_ends_in_the_commands_code_or_one_line(place, name, out_state, err_state,
                                                                           columns):
    # A closed, full or non-UTF-8 stdout ended in a traceback; COLUMNS=0 printed nothing and exited 0.
    args = [str(a).replace("{place}", str(place)) for a in STREAM_COMMANDS[name]]
    ref_code, ref_out, ref_err = reference(name, args)
    assert "Traceback" not in ref_err and ref_code in (0, 1, 2, 3)
    code, out, err = console_script(args, out_state, err_state, columns)
    writes = ref_out != ""
    working = out_state in ("ok", "ascii")
    assert code == (ref_code if working or not writes else 1 if out_state == "gone" else 2), (code, err)
    assert "Traceback" not in err
    if working:  # every figure whole, however wide the terminal
        assert "…" not in out
        assert set(FIGURE.findall(ref_out)) <= set(FIGURE.findall(out)), name
    if out_state == "ascii" and name == "plan of a non-ASCII model":
        assert "Mod\\xe8le" in out
    if err_state in ("ok", "ascii") and not working and writes:
        if out_state == "gone":  # | head: the reader went away, nothing more to say
            assert err == ""
        else:
            one_line(err, "error: stdout: cannot write: ")
    if err_state in ("ok", "ascii") and working and ref_code == 2:
        one_line(err)


@pytest.mark.parametrize("case", ["> /dev/full", ">&-", "| head -c 1", "LC_ALL=C, a non-ASCII model"])
def test_real_descriptors_end_in_one_line_or_a_quiet_exit(place, case):
    # The same through real descriptors: the console script as a shell runs it.
    command = [sys.executable, "-m", "dsa_kvcalc"]
    if case == "> /dev/full":
        with open("/dev/full", "w") as full:
            done = subprocess.run([*command, "plan", SEED], stdout=full, stderr=subprocess.PIPE, text=True,
                                  env=CHILD_ENV, timeout=20)
        assert done.returncode == 2
        assert one_line(done.stderr) == "error: stdout: cannot write: No space left on device"
    elif case == ">&-":
        done = subprocess.run([*command, "schema"], stderr=subprocess.PIPE, text=True, env=CHILD_ENV, timeout=20,
                              preexec_fn=lambda: os.close(1))
        assert done.returncode == 2 and one_line(done.stderr) == "error: stdout: cannot write: it is closed"
    elif case == "| head -c 1":
        child = subprocess.Popen([*command, "sweep", SEED, "--vary", "max-num-seqs=1:100000:1", "-f", "csv"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=CHILD_ENV)
        child.stdout.read(1)
        child.stdout.close()
        assert child.wait(20) == 1 and child.stderr.read() == b""
    else:
        env = {**CHILD_ENV, "LC_ALL": "C", "PYTHONUTF8": "0"}
        env.pop("PYTHONIOENCODING", None)
        done = subprocess.run([*command, "plan", place / "accented.yaml"], capture_output=True, env=env, timeout=20)
        assert done.returncode == 0, done.stderr
        assert "Mod\\xe8le" in done.stdout.decode("ascii")


# Special files as input: devices, FIFOs, sockets, folders, files over the limit --------------------------------------

SPECIAL = {"a FIFO without a writer": "{place}/fifo", "a link to a FIFO": "{place}/link-to-fifo", "/dev/zero": "/dev/zero",
           "/dev/urandom": "/dev/urandom", "/dev/null": "/dev/null", "a folder": "{place}/a-folder",
           "a socket": "{place}/socket", "100 MiB": "{place}/sparse"}
READERS = {
    "plan": (["plan", "{file}"], "recipe"), "sweep": (["sweep", "{file}", "--vary", "max-num-seqs=64"], "recipe"),
    "recommend": (["recommend", "{file}", "--target-concurrency", 1, "--min-kv-tokens", 1], "recipe"),
    "verify": (["verify", "{file}", "--gpu"], "recipe"), "calibrate": (["calibrate", "{file}", "--set", "gpu=B200"], "log"),
    "calibrate --recipe": (["calibrate", RTX, "--recipe", "{file}", "--set", "gpu=B200"], "recipe"),
    "calibrate --after": (["calibrate", RTX, "--set", "gpu=B200", "--after", "{file}"], "--after"),
}


@FEW
@given(st.sampled_from(sorted(SPECIAL)), st.sampled_from(sorted(READERS)))
def test_a_file_that_is_not_a_regular_one_or_too_large_is_one_line_at_once(place, kind, reader):
    # `calibrate /dev/zero` never ended, a FIFO without a writer blocked, and nothing bounded how much was read.
    file = SPECIAL[kind].replace("{place}", str(place))
    args, key = READERS[reader]
    line = one_line(cli(*[file if a == "{file}" else a for a in args]).stderr, f"error: {key}: {file} is ")
    assert line.endswith(("not a regular file", "MiB: not a recipe", "MiB: not a vLLM startup log")), line


@SOME
@given(st.binary(max_size=3000).filter(lambda data: b"\r" not in data), st.integers(0, 4000), st.integers(1, 300))
def test_inputs_read_a_regular_file_whole_up_to_the_limit_and_never_beyond(data, limit, line_limit):
    with tempfile.NamedTemporaryFile() as file:
        file.write(data)
        file.flush()
        path = Path(file.name)
        if len(data) > limit:
            with pytest.raises(inputs.Unreadable, match="is over"):
                inputs.read_bytes(path, limit, "recipe")
            with pytest.raises(inputs.Unreadable, match="is over"):
                list(inputs.read_lines(path, limit, "log", line_limit))
            return
        assert inputs.read_bytes(path, limit, "recipe") == data
        lines = list(inputs.read_lines(path, limit, "log", line_limit))
        assert "".join(lines) == data.decode("utf-8", "replace")
        assert all(len(line) <= line_limit for line in lines)


def test_a_log_that_grows_past_the_limit_while_read_is_refused(tmp_path):
    log = tmp_path / "growing.log"
    log.write_text("first line\n")
    lines = inputs.read_lines(log, 1 << 16, "vLLM startup log", 1 << 10)
    assert next(lines) == "first line\n"
    with open(log, "a") as more:
        more.write("x" * 100 + "\n" * 1000)
        more.write("y\n" * (1 << 16))
    with pytest.raises(inputs.Unreadable, match="is over 0 MiB"):
        list(lines)


# Versions of thousands of digits -------------------------------------------------------------------------------------

def digits(count: int) -> str:
    return ("1234567890" * (count // 10 + 1))[:count]


versions = st.builds(lambda v, parts, tag: v + ".".join(digits(n) for n in parts) + tag, st.sampled_from(["", "v"]),
                     st.lists(st.one_of(st.integers(1, 7), st.integers(7, 6000)), min_size=1, max_size=4),
                     st.one_of(st.just(""), st.builds(lambda n: "rc" + digits(n), st.integers(1, 6000)),
                               st.sampled_from([".dev1+g1234", "-x", "+" + "a" * 70])))


@FEW
@given(versions, st.sampled_from(["--set", "file", "--vary", "log"]))
def test_a_version_of_any_length_is_planned_or_one_line(tmp_path_factory, version, where):
    # A vllm-version of thousands of digits ended in a traceback (Python converts no int of over 4,300 digits).
    folder = tmp_path_factory.mktemp("version")
    recipe = folder / "recipe.yaml"
    recipe.write_text(SEED.read_text())
    if where == "--set":
        result = cli("plan", recipe, "-f", "json", "--set", f"vllm-version={version}")
    elif where == "file":
        recipe.write_text(f"model: DeepSeek-V3.2\ngpu: H200\ntensor-parallel-size: 8\nvllm-version: '{version}'\n")
        result = cli("plan", recipe, "-f", "json")
    elif where == "--vary":
        result = cli("sweep", recipe, "--vary", f"vllm-version={version}", "-f", "jsonl", "--backend", "auto")
    else:
        log = folder / "startup.log"
        log.write_text(f"INFO vLLM API server version {version}\n" + RTX.read_text().split("\n", 3)[3])
        result = cli("calibrate", log, "--set", "gpu=B200", "-f", "json")
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 2:
        one_line(result.stderr)
    elif where in ("--set", "file"):
        assert json.loads(result.stdout)["recipe"]["vllm-version"] == version.removeprefix("v")
    elif where == "--vary":
        row = json.loads(result.stdout.splitlines()[0])
        assert row.get("engine_label") == f"vLLM {version.removeprefix('v')}" or "error" in row


# verify: a torch or DeepGEMM that does not import, a GPU that cannot be reached -----------------------------------

def noise() -> None:
    """What a torch or DeepGEMM build says while it loads: lines on stdout and stderr, a warning."""
    import warnings

    print("loading\nstill loading")
    print("a C++ banner", file=sys.stderr)
    warnings.warn("Failed to initialize NumPy: _ARRAY_API not found")


class Failing:
    """A finder whose import of one module fails with the given exception, as a broken build's would."""

    def __init__(self, name: str, error: Exception):
        self.name, self.error = name, error

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name:
            noise()
            raise self.error
        return None


def fake_torch(stage: str, error: Exception, warning: str):
    """A torch whose CUDA side fails at stage: an H200 otherwise, whose memory query fails from its second call
    when the stage is the pass itself."""
    calls = []

    def mem_get_info():
        calls.append(1)
        if stage == "mem_get_info" or (stage == "the pass" and len(calls) > 1):
            raise error
        return 149_557_477_376, 150_109_880_320

    def is_available():
        noise()
        if stage == "is_available raises":
            raise error
        if stage == "no GPU":
            import warnings
            warnings.warn(warning)
        return stage != "no GPU"

    def get_device_properties(index):
        if stage == "get_device_properties":
            raise error
        return types.SimpleNamespace(name="NVIDIA H200", major=9, minor=0)

    cuda = types.SimpleNamespace(is_available=is_available, mem_get_info=mem_get_info,
                                 get_device_properties=get_device_properties)
    return types.SimpleNamespace(__version__="2.11.0+cu130", cuda=cuda)


STAGES = ["import torch", "is_available raises", "no GPU", "mem_get_info", "get_device_properties",
          "import deep_gemm", "the pass"]
ERRORS = [OSError, ImportError, RuntimeError, AttributeError, ValueError, SyntaxError]


@FEW
@given(st.sampled_from(STAGES), st.sampled_from(ERRORS), st.text(max_size=40), st.text(max_size=30))
def test_verify_without_a_usable_torch_or_gpu_is_exit_3_with_one_line_naming_the_cause(stage, kind, message, said):
    # A torch that failed to load, or a GPU busy or in exclusive mode, ended in a traceback.
    if stage == "the pass":
        kind = RuntimeError  # what torch raises for a CUDA failure
    error = kind(message)
    with pytest.MonkeyPatch.context() as patch:
        for name in ("torch", "deep_gemm"):
            patch.delitem(sys.modules, name, raising=False)
        if stage in ("import torch", "import deep_gemm"):
            patch.setattr(sys, "meta_path", [Failing(stage.split()[1], error), *sys.meta_path])
        if stage != "import torch":
            patch.setitem(sys.modules, "torch", fake_torch(stage, error, said))
        if stage != "import deep_gemm":
            patch.setitem(sys.modules, "deep_gemm", types.SimpleNamespace(__version__="2.8.2",
                                                                          fp8_fp4_paged_mqa_logits=None))
        result = cli("verify", "--gpu")
    assert result.exit_code == 3, result.output
    line = one_line(result.stderr)
    first = (said if stage == "no GPU" else message).strip().splitlines()
    named = first[0] if first else ("UserWarning" if stage == "no GPU" else kind.__name__)
    assert all(part in line for part in re.split(r"[^ -~]+", named) if part), (named, line)


# Outputs: attributes, names near the limit, several at once, signals, a removed working folder, odd names ------------

def access_acl(uids: list[int]) -> bytes:
    """A POSIX access ACL as Linux stores it (system.posix_acl_access): the owner rw, each uid r, group r, mask r,
    others nothing."""
    entry = struct.Struct("<HHI").pack
    users = b"".join(entry(0x02, 4, uid) for uid in sorted(uids))
    return struct.pack("<I", 2) + entry(0x01, 6, 2 ** 32 - 1) + users + entry(0x04, 4, 2 ** 32 - 1) + \
        entry(0x10, 4, 2 ** 32 - 1) + entry(0x20, 0, 2 ** 32 - 1)


def xattrs(path: Path) -> dict[str, bytes]:
    return {name: os.getxattr(path, name) for name in os.listxattr(path)}


@FEW
@given(st.dictionaries(st.text("abcdefghij", min_size=1, max_size=8).map(lambda n: f"user.{n}"),
                       st.binary(min_size=1, max_size=64), max_size=4),
       st.lists(st.integers(1000, 60000), unique=True, max_size=3), st.sampled_from([0o600, 0o640, 0o664, 0o751]),
       st.booleans())
def test_a_replaced_file_keeps_its_acls_and_attributes_or_is_written_in_place(tmp_path_factory, named, uids, mode,
                                                                            refused):
    # --output dropped a file's ACL: the temporary renamed over it was a new file without one.
    folder = tmp_path_factory.mktemp("attributes")
    out = folder / "plan.json"
    out.write_text("old")
    out.chmod(mode)
    try:
        for name, value in named.items():
            os.setxattr(out, name, value)
        if uids:
            os.setxattr(out, "system.posix_acl_access", access_acl(uids))
    except OSError as error:
        pytest.skip(f"no extended attributes here: {error.strerror}")
    before = os.stat(out), xattrs(out)
    with pytest.MonkeyPatch.context() as patch:
        if refused:  # an attribute the temporary may not be given (security.*, trusted.* without the privilege)
            patch.setattr(os, "setxattr", lambda *args: (_ for _ in ()).throw(PermissionError(errno.EPERM, "no")))
        result = cli("plan", SEED, "-f", "json", "-o", out)
    assert result.exit_code == 0, result.output
    after = os.stat(out)
    assert json.loads(out.read_text())["recipe"]["gpu"] == "B200"
    assert xattrs(out) == before[1] and stat.S_IMODE(after.st_mode) == stat.S_IMODE(before[0].st_mode)
    assert (after.st_ino == before[0].st_ino) == (refused and bool(before[1]))  # in place only where it must be
    assert hidden(folder) == []


@FEW
@given(st.text(st.sampled_from("ab-é字"), min_size=1, max_size=140))
def test_an_output_name_up_to_the_limit_is_written_and_a_longer_one_refused_before_any_work(tmp_path_factory, name):
    # A name near the file-name limit failed after the work: the hidden temporary's name was longer.
    folder = tmp_path_factory.mktemp("names")
    result = cli("plan", SEED, "-f", "csv", "-o", folder / name)
    if len(name.encode()) <= os.pathconf(folder, "PC_NAME_MAX"):
        assert result.exit_code == 0, result.output
        assert (folder / name).read_text().startswith("backend,") and hidden(folder) == []
    else:
        assert one_line(result.stderr).endswith("File name too long") and list(folder.iterdir()) == []


def stub_plot(patch, after_rows=lambda: None):
    """--plot without matplotlib: a PNG of five bytes, drawn after the rows (when after_rows runs too)."""
    from dsa_kvcalc import plot

    patch.setattr(plot, "load_pyplot", lambda: None)
    patch.setattr(plot, "png_bytes", lambda series: after_rows() or b"\x89PNG!")


@FEW
@given(st.sampled_from(["new", "existing", "/dev/full"]),
       st.sampled_from(["new", "existing", "/dev/full", "a FIFO nobody reads", "its folder removed meanwhile"]))
def test_several_outputs_land_together_or_not_at_all(tmp_path_factory, rows_target, plot_target):
    # `sweep -o rows.csv --plot p.png` replaced rows.csv, then failed on the plot.
    folder = tmp_path_factory.mktemp("together")
    (folder / "plots").mkdir()
    rows = Path("/dev/full") if rows_target == "/dev/full" else folder / "rows.csv"
    plot = {"/dev/full": Path("/dev/full"), "a FIFO nobody reads": folder / "plots" / "fifo"}.get(
        plot_target, folder / "plots" / "p.png")
    if rows_target == "existing":
        rows.write_text("old rows\n")
    if plot_target == "existing":
        plot.write_bytes(b"old plot")
    if plot_target == "a FIFO nobody reads":
        os.mkfifo(plot)
    removed = plot_target == "its folder removed meanwhile"
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    with pytest.MonkeyPatch.context() as patch:
        from dsa_kvcalc import output
        patch.setattr(output, "FIFO_WAIT_SECONDS", 0.05)
        stub_plot(patch, lambda: removed and (folder / "plots").rename(folder / "elsewhere"))
        result = cli("sweep", SEED, "--vary", "max-num-seqs=64,128", "-f", "csv", "-o", rows, "--plot", plot)
    fine = rows_target != "/dev/full" and plot_target in ("new", "existing")
    assert result.exit_code == (0 if fine else 2), result.output
    now = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    if fine:
        assert now[rows].startswith(b"max-num-seqs,") and now[plot] == b"\x89PNG!"
    else:
        one_line(result.stderr, "error: --output: " if rows_target == "/dev/full" != plot_target else "error: --")
        assert {p.name: v for p, v in now.items()} == {p.name: v for p, v in before.items()}
    assert not [p for p in folder.rglob(".*")]


SIGNALLED = """import pathlib, sys, time
from dsa_kvcalc.output import outputs
def rows():
    print("writing", flush=True)
    for i in range(3000):
        yield "row %d\\n" % i
        if i % 100 == 0:
            time.sleep(0.005)
with outputs() as files:
    files.write(rows(), pathlib.Path(sys.argv[1]))
    files.write(["plot\\n"], pathlib.Path(sys.argv[2]), "--plot")
"""
CATCHABLE = sorted(s for s in TERMINATING if signal.getsignal(s) is not signal.SIG_IGN)  # Python ignores SIGPIPE


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(CATCHABLE), st.floats(0, 0.25), st.booleans())
def test_any_terminating_signal_leaves_every_output_as_it_was_or_written_whole(tmp_path_factory, signum, delay,
                                                                               ignored):
    # SIGQUIT left the hidden temporary behind; only SIGTERM, SIGINT and SIGHUP were caught.
    folder = tmp_path_factory.mktemp("signals")
    rows, plot = folder / "rows.csv", folder / "p.png"
    rows.write_text("old\n")
    plot.write_text("old\n")
    child = subprocess.Popen([sys.executable, "-c", SIGNALLED, rows, plot], env=CHILD_ENV, stdout=subprocess.PIPE,
                             text=True, preexec_fn=lambda: ignored and signal.signal(signum, signal.SIG_IGN))
    assert child.stdout.readline() == "writing\n"
    time.sleep(delay)
    child.send_signal(signum)
    code = child.wait(20)
    written = (rows.read_text(), plot.read_text())
    whole = ("".join(f"row {i}\n" for i in range(3000)), "plot\n")
    assert written in (("old\n", "old\n"), whole) and hidden(folder) == []
    # Killed by the signal itself (-signum) only once the block is over: its handlers are gone, the files written.
    assert code == 0 and written == whole if ignored else code in (0, 128 + signum, -signum)
    assert written == whole or code == 128 + signum


RELATIVE = {"plan": ["plan", SEED], "schema": ["schema"], "calibrate": ["calibrate", RTX, "--set", "gpu=B200"],
            "sweep": ["sweep", SEED, "--vary", "max-num-seqs=64"], "sweep --plot": ["sweep", SEED, "--vary",
                                                                                   "max-num-seqs=64", "--plot"]}


@FEW
@given(st.sampled_from(sorted(RELATIVE)), st.text("abc-_.", min_size=1, max_size=12).filter(lambda n: n not in (
    ".", "..")))
def test_a_relative_output_in_a_removed_working_folder_is_one_line(tmp_path_factory, command, name):
    folder = tmp_path_factory.mktemp("gone")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        folder.rmdir()
        stub_plot(patch)
        option = "--plot" if command.endswith("--plot") else "-o"
        result = cli(*RELATIVE[command], *([] if option == "--plot" else ["-o"]), name)
    assert one_line(result.stderr).endswith("the working folder no longer exists"), result.stderr
    assert result.exit_code == 2


# A command line cannot hold half a UTF-16 pair (category Cs): Python decodes argv with surrogateescape, whose
# \udc80-\udcff the binary names below cover.
names = st.one_of(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/"), min_size=1,
                          max_size=20),
                  st.binary(min_size=1, max_size=20).filter(lambda b: b"\x00" not in b and b"/" not in b).map(
                      os.fsdecode))


@SOME
@given(names, st.sampled_from(["recipe", "log", "--after", "output folder", "plot folder"]))
def test_an_error_names_any_path_on_one_line(tmp_path_factory, name, role):
    # A path holding a newline gave a multi-line error.
    folder = tmp_path_factory.mktemp("odd")
    missing = folder / name / "x"
    args = {"recipe": ["plan", missing], "log": ["calibrate", missing], "--after": ["calibrate", RTX, "--after", missing],
            "output folder": ["plan", SEED, "-o", missing], "plot folder": ["sweep", SEED, "--vary",
                                                                            "max-num-seqs=64", "--plot", missing]}
    with pytest.MonkeyPatch.context() as patch:
        stub_plot(patch)
        result = cli(*args[role])
    assert result.exit_code == 2
    one_line(result.stderr)
    assert list(folder.iterdir()) == []


# Meaning: calibrate --after, --vary ---------------------------------------------------------------------------------

GIB = 1 << 30
RTX_KV_GIB, RTX_TOKENS = 10.29, 1_993_100


def after_log(version: str | None, kv_gib: float) -> str:
    """The RTX log as a vLLM of this version (None: a log that prints none) would print it with this much KV."""
    text = RTX.read_text()
    version_line = next(line for line in text.splitlines() if line.endswith("version 0.25.0"))
    text = text.replace(version_line, version_line.replace("0.25.0", version) if version else "")
    tokens = int(RTX_TOKENS * kv_gib / RTX_KV_GIB)
    return text.replace(f"Available KV cache memory: {RTX_KV_GIB} GiB", f"Available KV cache memory: {kv_gib:.2f} GiB") \
        .replace(f"{RTX_TOKENS:,} tokens", f"{tokens:,} tokens")


MAIN_BUILD = "0.34.0.dev12+g317081f00"  # a build of main, which reserves the decode logits (#62860)
# The RTX deployment planned on a B200 reserves max(the 512 MiB prefill budget, 64 sequences x 3 rows x 262,656
# columns x 6 B = 302,579,712 B) = 536,870,912 B with #62860: a KV drop of more than that is another deployment.
RTX_RESERVED = 512 << 20


@FEW
@given(st.sampled_from([None, engines.OLDEST_VLLM, "0.25.0", "0.30.0", "0.33.0", engines.NEWEST_VLLM, MAIN_BUILD]),
       st.one_of(st.just(RTX_KV_GIB), st.floats(RTX_KV_GIB - 2, RTX_KV_GIB + 0.5).map(lambda g: round(g, 2))))
def test_calibrate_after_needs_another_log_of_a_vllm_with_the_fix(tmp_path_factory, version, kv_gib):
    # `calibrate L --after L` (the same log, from a vLLM before the fix) reported a headroom.
    log = tmp_path_factory.mktemp("after") / "after.log"
    log.write_text(after_log(version, kv_gib))
    result = cli("calibrate", RTX, "--set", "gpu=B200", "--after", log, "-f", "json")
    drop = round(RTX_KV_GIB * GIB) - round(kv_gib * GIB)
    if kv_gib == RTX_KV_GIB:
        assert "its KV figures are the first log's" in one_line(result.stderr)
    elif version is None:
        assert "prints no vLLM version" in one_line(result.stderr)
    elif version != MAIN_BUILD:
        assert f"vLLM {version}, which does not reserve the decode logits" in one_line(result.stderr)
    elif not 0 <= drop <= RTX_RESERVED:
        assert "not the same deployment" in one_line(result.stderr)
    else:
        headroom = json.loads(result.stdout)["headroom"]
        assert headroom["reserved_bytes"] == RTX_RESERVED and 0 <= headroom["headroom_bytes"] <= RTX_RESERVED
    assert result.exit_code in (0, 2)


def test_calibrate_after_a_main_log_gives_the_headroom_by_hand(tmp_path):
    # KV 10.29 GiB before, 10.00 GiB after: 11,048,803,369 - 10,737,418,240 = 311,385,129 B fell where 536,870,912 B
    # were reserved, so the profile's peak sat 536,870,912 - 311,385,129 = 225,485,783 B above the indexer's use.
    log = tmp_path / "after.log"
    log.write_text(after_log(MAIN_BUILD, 10.0))
    headroom = json.loads(cli("calibrate", RTX, "--set", "gpu=B200", "--after", log, "-f", "json").stdout)["headroom"]
    assert (headroom["kv_bytes_before"], headroom["kv_bytes_after"]) == (11_048_803_369, 10_737_418_240)
    assert headroom["headroom_bytes"] == 225_485_783


def test_calibrate_the_same_log_twice_is_refused():
    assert "the same log twice?" in one_line(cli("calibrate", RTX, "--set", "gpu=B200", "--after", RTX).stderr)


VARIED_KEYS = ["max-num-seqs", "max_num_seqs", "memory.weights_gib", "memory.weights_bytes", "memory.non_torch_gib",
               "memory.cudagraph_gib", "memory.cudagraph_gib.auto", "memory.cudagraph_bytes.deep_select",
               "memory.cudagraph_gib.deep_select", "memory.gpu", "memory.rest", "speculative-config",
               "speculative-config.num_speculative_tokens", "speculative_config.num_speculative_tokens",
               "compilation-config.max_cudagraph_capture_size"]
VALUES = {"memory.gpu": "B200", "memory.rest": "weights", "speculative-config": "{}", "max-num-seqs": "64"}


def as_yaml(keys: list[str]) -> str:
    """A recipe file that sets every key, nested as a file nests them: a key met twice at one level is written
    twice there, which is what a file that gives both would hold."""
    tree: list = []
    for key in keys:
        level, (*parents, leaf) = tree, key.split(".")
        for part in parents:
            node = next((child for name, child in level if name == part and isinstance(child, list)), None)
            if node is None:
                node = []
                level.append((part, node))
            level = node
        level.append((leaf, VALUES.get(key, "1")))

    def lines(level, indent):
        for name, child in level:
            yield f"{indent}{name}:" + ("" if isinstance(child, list) else f" {child}")
            if isinstance(child, list):
                yield from lines(child, indent + "  ")

    return "\n".join(lines(tree, "")) + "\n"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(VARIED_KEYS), min_size=1, max_size=3))
def test_vary_refuses_exactly_the_pairs_a_recipe_file_refuses(keys):
    # `--vary memory.weights_gib=... --vary memory.weights_bytes=...` let one silently win, where a file refuses both.
    import yaml

    try:
        read_values(yaml.load(as_yaml(keys), Loader=RecipeLoader))
        twice = False
    except RecipeError as error:
        twice = "twice" in str(error)
    if twice:
        with pytest.raises(RecipeError, match="varied twice"):
            parse_varies([f"{key}=1" for key in keys])
    else:
        parse_varies([f"{key}=1" for key in keys])


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from([("gpu", "H200"), ("gpu", "B200"), ("memory.weights_gib", "80"),
                                 ("memory.cudagraph_gib.auto", "0.5"), ("memory.gpu", "H200"),
                                 ("max-num-seqs", "64"), ("memory.rest", "weights")]), min_size=1, max_size=3,
                unique_by=lambda pair: pair[0]))
def test_each_sweep_row_is_what_plan_with_the_same_sets_says(pairs):
    # A point of a sweep follows every rule `plan --set` follows: same answer, or the same one-line refusal.
    recipe = ROOT / "recipes" / "deepseek-v3.2-8xh200-tp8.yaml"  # no memory block: a varied term records its GPU
    swept = cli("sweep", recipe, *(a for key, value in pairs for a in ("--vary", f"{key}={value}")), "-f", "jsonl",
                "--backend", "auto")
    [row] = [json.loads(line) for line in swept.stdout.splitlines()]
    planned = cli("plan", recipe, *(a for key, value in pairs for a in ("--set", f"{key}={value}")), "-f", "json")
    if planned.exit_code == 2:
        assert row["error"] == one_line(planned.stderr).removeprefix("error: ")
    else:
        auto = next(b for b in json.loads(planned.stdout)["backends"] if b["backend"] == "auto")
        assert row["kv_cache_tokens"] == auto["kv_cache_tokens"]


# Memory: flat in every format, whatever fails ---------------------------------------------------------------------

failed_row = st.builds(lambda seqs, error: {"max-num-seqs": seqs, "error": error}, st.integers(), st.text(max_size=30))
planned_row = st.builds(lambda seqs, tokens: {"max-num-seqs": seqs, "backend": "auto", "available": True,
                                              "decode_logits.rows": 1, "kv_cache_tokens": tokens},
                        st.integers(), st.integers(0, 10 ** 9))
unavailable_row = st.builds(lambda seqs: {"max-num-seqs": seqs, "backend": "deep_select", "available": False,
                                          "reason": "not on SM90", "decode_logits": None}, st.integers())


def test_csv_header_is_the_fields_up_to_the_first_planned_row_then_error():
    # The header: every field of the rows up to the first available one, in order, a field with dotted children
    # (decode_logits, null where unavailable) left out, error kept; a later row's new field (extra) gets no column.
    rows = [{"max-num-seqs": 1, "error": "bad"},
            {"max-num-seqs": 2, "backend": "deep_select", "available": False, "reason": "not on SM90",
             "decode_logits": None},
            {"max-num-seqs": 3, "backend": "auto", "available": True, "decode_logits.rows": 6, "kv_cache_tokens": 7},
            {"max-num-seqs": 4, "error": "late", "extra": 1}]
    assert "".join(sweep_render.csv_lines(iter(rows))) == (
        "max-num-seqs,error,backend,available,reason,decode_logits.rows,kv_cache_tokens\n"
        "1,bad,,,,,\n2,,deep_select,False,not on SM90,,\n3,,auto,True,,6,7\n4,late,,,,,\n")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(failed_row, planned_row, unavailable_row), min_size=1, max_size=40), st.integers(1, 400))
def test_csv_rows_are_the_same_whatever_spills(rows, wait_bytes):
    whole = "".join(sweep_render.csv_lines(iter(rows)))  # WAIT_BYTES of 1 MiB: these rows never spill
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sweep_render, "WAIT_BYTES", wait_bytes)  # spill to disk early, or not at all
        assert "".join(sweep_render.csv_lines(iter(rows))) == whole


def peak_bytes(format: str, count: int) -> int:
    """What streaming count failed points in this format holds at most in memory."""
    rows = ({"max-num-seqs": -i, "error": f"max-num-seqs: must be at least 1 and at most 1,048,576, got -{i % 7}"}
            for i in range(count))
    chunks = {"csv": sweep_render.csv_lines, "jsonl": sweep_render.jsonl_lines,
              "table": lambda rows: console_chunks(lambda c: sweep_render.table_parts(["max-num-seqs"], rows, c))}
    tracemalloc.start()
    for _ in chunks[format](rows):
        pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


@pytest.mark.parametrize("format, rows", [("csv", 1000), ("jsonl", 1000), ("table", 40)])
def test_memory_stays_flat_in_every_format_when_every_point_fails(format, rows):
    # A sweep whose points all failed grew in CSV (every row waited for the header), not in JSONL.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sweep_render, "TABLE_ROWS", 20)  # a table's memory is a part's: twenty rows show it
        patch.setattr(sweep_render, "WAIT_BYTES", 64 << 10)
        peak_bytes(format, rows)  # imports and first-use caches out of the way
        few, many = peak_bytes(format, rows), peak_bytes(format, 10 * rows)
    assert many < few * 1.5 + (512 << 10), (few, many)  # rich's caches grow up to their bound
