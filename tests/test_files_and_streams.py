"""What a user sees of the files and streams of dsa-kvcalc when something is wrong. An output is written whole or
not at all, every file of one command or none, and never over an input of the command; a stdout that cannot take the
output ends in one line (exit 2) or, when its reader went away, a quiet exit 1; an input past its size cap, or one
that is neither a regular file nor a pipe, is one line at once; every error is one line of at most 300 characters.
Each test runs a command as a user would and checks the files, the exit code and stderr."""

import io
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import LOGS, ROOT, SEED, fails, runner
from dsa_kvcalc.cli import app, main

RTX = LOGS / "deepseek-v4-flash-2xrtxpro6000-tp2-stock-v0.25.0.log"
CHILD_ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
MIB = 1 << 20
# A local checkpoint's config.json: what plan reads of it, and a name that is not ASCII.
CONFIG = {"num_hidden_layers": 61, "hidden_size": 7168, "index_n_heads": 64, "index_head_dim": 128,
          "index_topk": 2048, "max_position_embeddings": 32768, "_name_or_path": "Modèle-DSA"}
LOCAL_RECIPE = "model: checkpoint\ngpu: H200\ntensor-parallel-size: 8\n"
HUGE = "1" + "0" * 5000  # a value of 5,001 digits: Python converts none of over 4,300


def cli(*args):
    """The command in process: never an exception other than typer's exit, never more than seconds of CPU."""
    started = time.process_time()
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert time.process_time() - started < 10, args
    return result


def child(*args, **options):
    return subprocess.run([sys.executable, "-m", "dsa_kvcalc", *map(str, args)], env=CHILD_ENV, timeout=60,
                          **{"capture_output": True, "text": True} | options)


def one_line(text: str, start: str = "error: ") -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start), text
    assert "Traceback" not in text
    return lines[0]


def hidden(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob(".*")]


def contents(folder: Path) -> dict[str, bytes]:
    """Every file under folder (links as where they point), by name."""
    return {str(p.relative_to(folder)): os.readlink(p).encode() if p.is_symlink() else p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_symlink() or p.is_file()}


def stub_plot(patch, after_rows=lambda: None):
    """--plot without matplotlib: a PNG of five bytes, drawn after the rows (when after_rows runs too)."""
    from dsa_kvcalc import plot

    patch.setattr(plot, "load_pyplot", lambda: None)
    patch.setattr(plot, "png_bytes", lambda series: after_rows() or b"\x89PNG!")


def console_script(args, stdout) -> tuple[int, str]:
    """dsa_kvcalc.cli.main, the console script, in process with this stdout: (exit code, stderr)."""
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stdout", stdout)
        patch.setattr(sys, "stderr", err)
        with pytest.raises(SystemExit) as exited:
            main([str(a) for a in args])
    return exited.value.code, err.getvalue()


# Output files -------------------------------------------------------------------------------------------------------

WRITERS = {"plan": ["plan", SEED, "-f", "json"], "sweep": ["sweep", SEED, "--vary", "max-num-seqs=64,128", "-f", "csv"],
           "schema": ["schema"]}


@pytest.mark.parametrize("command", sorted(WRITERS))
@pytest.mark.parametrize("mode", [0o600, 0o751])  # neither what a new file gets nor what the other test asks
def test_an_output_replaces_its_target_whole_and_keeps_its_mode(tmp_path, command, mode):
    out = tmp_path / "out.txt"
    out.write_text("old")
    out.chmod(mode)
    assert cli(*WRITERS[command], "-o", out).exit_code == 0
    assert out.read_text() == cli(*WRITERS[command]).stdout  # what stdout gets, whole
    assert stat.S_IMODE(out.stat().st_mode) == mode and hidden(tmp_path) == []


def test_a_new_output_gets_the_mode_the_umask_gives(tmp_path):
    umask = os.umask(0o027)
    try:
        with pytest.MonkeyPatch.context() as patch:
            stub_plot(patch)
            swept = cli("sweep", SEED, "--vary", "max-num-seqs=64,128", "-o", tmp_path / "rows.csv", "--plot",
                        tmp_path / "p.png")
        calibrated = cli("calibrate", RTX, "--set", "gpu=B200", "-o", tmp_path / "calibrated.yaml")
    finally:
        os.umask(umask)
    assert swept.exit_code == calibrated.exit_code == 0
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()} == {
        "rows.csv": 0o640, "p.png": 0o640, "calibrated.yaml": 0o640}


def test_a_name_at_the_file_name_limit_is_written(tmp_path):
    out = tmp_path / ("字" * 85)  # 255 bytes
    assert cli("plan", SEED, "-f", "csv", "-o", out).exit_code == 0
    assert out.read_text() == cli("plan", SEED, "-f", "csv").stdout and hidden(tmp_path) == []


def test_a_link_is_written_through_and_stays_a_link(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "plan.csv").write_text("old\n")
    link = tmp_path / "link.csv"
    link.symlink_to("data/plan.csv")
    assert cli("plan", SEED, "-f", "csv", "-o", link).exit_code == 0
    assert link.is_symlink() and os.readlink(link) == "data/plan.csv"
    assert (tmp_path / "data" / "plan.csv").read_text() == cli("plan", SEED, "-f", "csv").stdout
    assert hidden(tmp_path) == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_a_device_is_written_in_place_and_stays_a_device():
    # As root, `plan R -o /dev/full` once replaced the device node with a regular file.
    fails(cli("plan", SEED, "-o", "/dev/full"), "error: --output: cannot write /dev/full: No space left on device")
    assert cli("plan", SEED, "-o", "/dev/null").exit_code == 0
    assert stat.S_ISCHR(os.lstat("/dev/full").st_mode) and stat.S_ISCHR(os.lstat("/dev/null").st_mode)


@pytest.mark.skipif(not os.path.islink("/dev/stdout"), reason="no /dev/stdout link")
def test_output_to_dev_stdout_writes_the_pipe_and_keeps_the_link():
    target = os.readlink("/dev/stdout")
    done = child("plan", SEED, "-f", "json", "-o", "/dev/stdout")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["recipe"]["gpu"] == "B200"
    assert os.readlink("/dev/stdout") == target


def as_input(folder: Path, spelling: str) -> tuple[list, Path]:
    """(a command, the path its -o names) where that path is one of the command's inputs."""
    recipe, log, model = folder / "recipe.yaml", folder / "startup.log", folder / "checkpoint"
    recipe.write_text(SEED.read_text())
    log.write_text(RTX.read_text())
    model.mkdir()
    (model / "config.json").write_text(json.dumps(CONFIG))
    (folder / "link.yaml").symlink_to("recipe.yaml")
    os.link(recipe, folder / "hard.yaml")
    return {"plan R -o R": (["plan", recipe], recipe), "a link to R": (["plan", recipe], folder / "link.yaml"),
            "a hard link to R": (["plan", recipe], folder / "hard.yaml"),
            "calibrate's log": (["calibrate", log, "--set", "gpu=B200"], log),
            "calibrate's --recipe": (["calibrate", log, "--recipe", recipe, "--set", "gpu=B200"], recipe),
            "a varied model's config.json": (["sweep", recipe, "--vary", "model=checkpoint,DeepSeek-V3.2"],
                                             model / "config.json")}[spelling]


@pytest.mark.parametrize("spelling", ["plan R -o R", "a link to R", "a hard link to R", "calibrate's log",
                                      "calibrate's --recipe", "a varied model's config.json"])
def test_an_input_of_the_command_is_refused_as_its_output(tmp_path, spelling):
    args, target = as_input(tmp_path, spelling)
    before = contents(tmp_path)
    fails(cli(*args, "-o", target), f"error: --output: {target} is an input of this command")
    assert contents(tmp_path) == before


TOGETHER = [("new", "new"), ("existing", "existing"), ("existing", "missing folder"), ("existing", "/dev/full"),
            ("existing", "folder removed meanwhile"), ("existing", "a folder"), ("/dev/full", "existing")]


@pytest.mark.parametrize("rows_target, plot_target", TOGETHER)
def test_sweep_rows_and_plot_land_together_or_not_at_all(tmp_path, rows_target, plot_target):
    # `sweep -o rows.csv --plot p.png` replaced rows.csv, then failed on the plot.
    (tmp_path / "plots").mkdir()
    rows = Path("/dev/full") if rows_target == "/dev/full" else tmp_path / "rows.csv"
    plot = {"/dev/full": Path("/dev/full"), "missing folder": tmp_path / "missing" / "p.png",
            "a folder": tmp_path / "plots"}.get(plot_target, tmp_path / "plots" / "p.png")
    if rows_target == "existing":
        rows.write_text("old rows\n")
    if plot_target == "existing":
        plot.write_bytes(b"old plot")
    before = contents(tmp_path)
    with pytest.MonkeyPatch.context() as patch:
        moved = plot_target == "folder removed meanwhile"
        stub_plot(patch, lambda: moved and (tmp_path / "plots").rename(tmp_path / "elsewhere"))
        result = cli("sweep", SEED, "--vary", "max-num-seqs=64,128", "-f", "csv", "-o", rows, "--plot", plot)
    if plot_target in ("new", "existing") and rows_target != "/dev/full":
        assert result.exit_code == 0, result.output
        assert rows.read_text() == cli("sweep", SEED, "--vary", "max-num-seqs=64,128", "-f", "csv").stdout
        assert plot.read_bytes() == b"\x89PNG!"
    else:
        option = "--output" if rows_target == "/dev/full" else "--plot"
        assert result.exit_code == 2
        one_line(result.stderr, f"error: {option}: cannot write ")
        after = contents(tmp_path)
        assert {Path(k).name: v for k, v in after.items()} == {Path(k).name: v for k, v in before.items()}
    assert hidden(tmp_path) == []


BAD_TARGETS = {"a missing folder": ("missing/out.txt", "No such file or directory"),
               "a folder": ("folder", "Is a directory"),
               "a dangling link": ("dangling", "No such file or directory"),
               "a name over the file-name limit": ("字" * 90, "File name too long"),  # 270 bytes
               "a socket": ("socket", "No such device or address")}
OUTPUT_COMMANDS = {"plan": ["plan", SEED], "schema": ["schema"], "calibrate": ["calibrate", RTX, "--set", "gpu=B200"],
                   "sweep": ["sweep", SEED, "--vary", "max-num-seqs=64"]}


@pytest.mark.parametrize("command", sorted(OUTPUT_COMMANDS))
@pytest.mark.parametrize("kind", sorted(BAD_TARGETS))
def test_an_output_that_cannot_be_written_is_one_line_and_leaves_no_file(tmp_path, command, kind):
    (tmp_path / "folder").mkdir()
    (tmp_path / "dangling").symlink_to("gone/out.txt")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(tmp_path / "socket"))
        before = contents(tmp_path)
        name, reason = BAD_TARGETS[kind]
        result = cli(*OUTPUT_COMMANDS[command], "-o", tmp_path / name)
    assert result.exit_code == 2
    assert one_line(result.stderr) == f"error: --output: cannot write {tmp_path / name}: {reason}"
    assert contents(tmp_path) == before and hidden(tmp_path) == []


def test_an_output_in_a_removed_working_folder_is_one_line(tmp_path):
    folder = tmp_path / "gone"
    folder.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        folder.rmdir()
        result = cli("plan", SEED, "-o", "out.csv")
    assert result.exit_code == 2
    assert one_line(result.stderr) == "error: --output: cannot write out.csv: No such file or directory"


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, 130)])
def test_a_sweep_stopped_by_sigterm_or_ctrl_c_leaves_the_old_file_and_no_temporary(tmp_path, signum, code):
    # A `sweep -o` killed by SIGTERM left its hidden temporary file behind (1.17 GB after ten minutes).
    out = tmp_path / "sweep.csv"
    out.write_text("old\n")
    sweep = subprocess.Popen([sys.executable, "-m", "dsa_kvcalc", "sweep", SEED, "--vary", "max-num-seqs=1:1000000:1",
                              "--backend", "auto", "-o", out], env=CHILD_ENV, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not hidden(tmp_path) and time.monotonic() < deadline and sweep.poll() is None:
        time.sleep(0.02)
    assert hidden(tmp_path), "the sweep never started writing"
    sweep.send_signal(signum)
    assert sweep.wait(20) == code
    assert b"Traceback" not in sweep.stderr.read()
    assert hidden(tmp_path) == [] and out.read_text() == "old\n"


# stdout -----------------------------------------------------------------------------------------------------------

STDOUT_COMMANDS = {"plan": ["plan", SEED], "sweep": ["sweep", SEED, "--vary", "max-num-seqs=64,128"],
                   "calibrate": ["calibrate", RTX, "--set", "gpu=B200"], "fit": ["fit", SEED],
                   "recommend": ["recommend", SEED, "--target-concurrency", 64, "--min-kv-tokens", 1000],
                   "schema": ["schema"]}


def reader_gone():
    """A pipe whose reader has gone, as under `| head`."""
    read, write = os.pipe()
    os.close(read)
    return open(write, "w")


STDOUT_STATES = {"full": (lambda: open("/dev/full", "w"), 2, "error: stdout: cannot write: No space left on device"),
                 "its reader gone (| head)": (reader_gone, 1, ""),
                 "closed (>&-)": (lambda: None, 2, "error: stdout: cannot write: Bad file descriptor")}


@pytest.mark.parametrize("command", sorted(STDOUT_COMMANDS))
@pytest.mark.parametrize("state", sorted(STDOUT_STATES))
def test_a_stdout_that_cannot_take_the_output_is_one_line_or_a_quiet_exit(command, state):
    args = STDOUT_COMMANDS[command]
    assert console_script(args, io.TextIOWrapper(io.BytesIO())) == (0, "")  # with a stdout that works
    stdout, code, said = STDOUT_STATES[state]
    got, err = console_script(args, stdout())
    assert (got, err.strip()) == (code, said)


def test_half_a_character_from_the_recipe_is_written_escaped_to_stdout_and_to_a_file(tmp_path):
    # YAML's "\ud800" is half of a UTF-16 pair, which no UTF-8 output holds; `host` goes into the serve line as is.
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text('model: DeepSeek-V3.2\ngpu: H200\ntensor-parallel-size: 8\nhost: "a\\ud800b"\n')
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    assert console_script(["plan", recipe, "-f", "serve"], stdout) == (0, "")
    stdout.flush()
    assert "--host 'a\\ud800b'" in stdout.buffer.getvalue().decode()
    assert cli("plan", recipe, "-f", "serve", "-o", tmp_path / "serve.sh").exit_code == 0
    assert "--host 'a\\ud800b'" in (tmp_path / "serve.sh").read_text()


TABLES = {"sweep": ["sweep", SEED, "--vary", "max-num-seqs=64,128"], "fit": ["fit", SEED], "models": ["models"],
          "recommend": ["recommend", SEED, "--target-concurrency", 64, "--min-kv-tokens", 1000], "gpus": ["gpus"]}


@pytest.mark.parametrize("command", sorted(TABLES))
@pytest.mark.parametrize("columns", [0, 1, 39])
def test_a_table_for_a_terminal_under_40_columns_is_drawn_40_wide(command, columns):
    # COLUMNS=0 printed nothing and exited 0.
    def drawn(width: int) -> str:
        return runner.invoke(app, [str(a) for a in TABLES[command]], env={"COLUMNS": str(width)}).stdout

    narrow = drawn(columns)
    assert narrow == drawn(40) and "…" not in narrow
    assert max(len(line) for line in narrow.splitlines()) == 40


@pytest.fixture
def local_model(tmp_path) -> Path:
    """A recipe of a local checkpoint whose config.json names the model with a non-ASCII name."""
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "config.json").write_text(json.dumps(CONFIG))
    recipe = tmp_path / "local.yaml"
    recipe.write_text(LOCAL_RECIPE)
    return recipe


@pytest.mark.parametrize("case", ["> /dev/full", ">&-", "| head -c 1", "LC_ALL=C, a non-ASCII model"])
def test_real_descriptors_end_in_one_line_or_a_quiet_exit(local_model, case):
    if case == "> /dev/full":
        with open("/dev/full", "w") as full:
            done = child("plan", SEED, stdout=full, stderr=subprocess.PIPE, capture_output=False)
        assert done.returncode == 2
        assert one_line(done.stderr) == "error: stdout: cannot write: No space left on device"
    elif case == ">&-":
        done = child("schema", stdout=None, stderr=subprocess.PIPE, capture_output=False,
                     preexec_fn=lambda: os.close(1))
        assert done.returncode == 2 and one_line(done.stderr) == "error: stdout: cannot write: Bad file descriptor"
    elif case == "| head -c 1":
        sweep = subprocess.Popen([sys.executable, "-m", "dsa_kvcalc", "sweep", SEED, "--vary",
                                  "max-num-seqs=1:100000:1", "-f", "csv"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=CHILD_ENV)
        assert sweep.stdout.read(1) == b"m"
        sweep.stdout.close()
        assert sweep.wait(30) == 1 and sweep.stderr.read() == b""
    else:
        env = {**CHILD_ENV, "LC_ALL": "C", "PYTHONUTF8": "0"}
        done = subprocess.run([sys.executable, "-m", "dsa_kvcalc", "plan", local_model], capture_output=True,
                              env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "Mod\\xe8le-DSA" in done.stdout.decode("ascii")


# Inputs -----------------------------------------------------------------------------------------------------------

def padded(text: str, size: int, comment: str = "#") -> bytes:
    """text, then a line of comment (or spaces) that brings it to exactly size bytes."""
    data = text.encode()
    return data + (comment + " " * (size - len(data) - len(comment) - 1) + "\n").encode()


def test_a_recipe_of_1_mib_is_read_and_one_byte_more_is_refused(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_bytes(padded(SEED.read_text(), MIB))
    assert cli("plan", recipe, "-f", "json").stdout == cli("plan", SEED, "-f", "json").stdout
    recipe.write_bytes(padded(SEED.read_text(), MIB + 1))
    fails(cli("plan", recipe), f"error: recipe: {recipe} is over 1 MiB: not a recipe")


def test_a_log_of_64_mib_is_read_and_one_byte_more_is_refused(tmp_path):
    log = tmp_path / "startup.log"
    log.write_bytes(padded(RTX.read_text(), 64 * MIB, comment=""))
    assert cli("calibrate", log, "--set", "gpu=B200", "-f", "json").exit_code == 0
    log.write_bytes(padded(RTX.read_text(), 64 * MIB + 1, comment=""))
    fails(cli("calibrate", log, "--set", "gpu=B200"), f"error: log: {log} is over 64 MiB: not a vLLM startup log")


def test_a_config_json_of_4_mib_is_read_and_one_byte_more_is_refused(local_model):
    config = local_model.parent / "checkpoint" / "config.json"
    config.write_bytes(padded(json.dumps(CONFIG), 4 * MIB, comment=""))
    assert cli("plan", local_model).exit_code == 0
    config.write_bytes(padded(json.dumps(CONFIG), 4 * MIB + 1, comment=""))
    fails(cli("plan", local_model), f"{config} is over 4 MiB: not a config.json")


def test_a_process_substitution_is_read_within_the_recipes_cap():
    def bash(source: str):
        return subprocess.run(["bash", "-c", f'"$0" -m dsa_kvcalc plan <({source}) -f json', sys.executable],
                              capture_output=True, text=True, env=CHILD_ENV, timeout=60)

    read = bash(f"cat {SEED}")
    assert read.returncode == 0, read.stderr
    assert read.stdout == cli("plan", SEED, "-f", "json").stdout
    endless = bash("yes")  # a writer that never stops: read no further than the cap
    assert endless.returncode == 2
    assert one_line(endless.stderr).endswith("is over 1 MiB: not a recipe")


@pytest.mark.parametrize("value, problem", [("2001-13-45", "month must be in 1..12"),
                                            (HUGE, "Exceeds the limit (4300 digits) for integer string conversion")])
def test_a_yaml_value_python_cannot_hold_is_one_line(tmp_path, value, problem):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"model: DeepSeek-V3.2\ngpu: H200\nhost: {value}\n")
    line = fails(cli("plan", recipe), f"error: recipe: YAML error in {recipe} at line 3, column 7: {problem}")
    assert len(line) <= 300


SPECIAL = {"a folder": "Is a directory", "/dev/zero": "is not a regular file or a pipe",
           "/dev/urandom": "is not a regular file or a pipe", "a socket": "No such device or address"}
READERS = {"plan": (["plan", "{file}"], "recipe"), "sweep": (["sweep", "{file}", "--vary", "max-num-seqs=64"], "recipe"),
           "recommend": (["recommend", "{file}", "--target-concurrency", 1, "--min-kv-tokens", 1], "recipe"),
           "fit": (["fit", "{file}"], "recipe"), "calibrate": (["calibrate", "{file}", "--set", "gpu=B200"], "log"),
           "calibrate --recipe": (["calibrate", RTX, "--recipe", "{file}", "--set", "gpu=B200"], "recipe"),
           "calibrate --after": (["calibrate", RTX, "--set", "gpu=B200", "--after", "{file}"], "--after")}


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("kind", sorted(SPECIAL) + ["a FIFO without a writer"])
def test_a_file_that_is_neither_regular_nor_a_pipe_is_one_line_at_once(tmp_path, reader, kind):
    path = {"a folder": tmp_path, "a socket": tmp_path / "socket", "a FIFO without a writer": tmp_path / "fifo"}.get(
        kind, Path(kind))
    os.mkfifo(tmp_path / "fifo")
    args, key = READERS[reader]
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(tmp_path / "socket"))
        started = time.monotonic()
        result = cli(*[path if a == "{file}" else a for a in args])
    assert time.monotonic() - started < 10
    assert result.exit_code == 2
    line = one_line(result.stderr, f"error: {key if kind != 'a FIFO without a writer' else ''}")
    if kind in SPECIAL:
        assert str(path) in line and line.endswith(SPECIAL[kind])


# Every error: one line of at most 300 characters --------------------------------------------------------------------


@pytest.mark.parametrize("args, start", [
    (["plan", SEED, "--set", f"max-num-seqs={HUGE}"], "error: max-num-seqs: "),
    (["plan", "{recipe}"], "error: max-num-seqs: "),
    (["sweep", SEED, "--set", f"max-num-seqs={HUGE}", "--vary", "max-model-len=8192"], "error: max-num-seqs: "),
    (["recommend", SEED, "--target-concurrency", HUGE, "--min-kv-tokens", 1], "error: --target-concurrency: "),
    (["fit", SEED, "--max-model-len", HUGE], "error: --max-model-len: "),
    (["calibrate", RTX, "--set", "gpu=B200", "--set", f"max-num-seqs={HUGE}"], "error: max-num-seqs: "),
    (["schema", "-o", "/" + "d" * 250 + "/x" * 1000], "error: --output: cannot write /ddd"),
])
def test_every_error_is_one_line_cut_at_300_characters(tmp_path, args, start):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"model: DeepSeek-V3.2\ngpu: H200\nmax-num-seqs: '{HUGE}'\n")
    code, err = console_script([recipe if a == "{recipe}" else a for a in args], io.TextIOWrapper(io.BytesIO()))
    line = one_line(err, start)
    assert code == 2 and len(line) == 300 and line.endswith("...")


def test_a_short_error_is_whole_and_an_unprintable_character_escaped(tmp_path):
    missing = tmp_path / "a\nb\x1b.yaml"
    code, err = console_script(["plan", missing], io.TextIOWrapper(io.BytesIO()))
    assert code == 2
    assert one_line(err) == f"error: recipe: cannot read {tmp_path}/a\\nb\\x1b.yaml: No such file or directory"


# A command line cannot hold half a UTF-16 pair (category Cs): Python decodes argv with surrogateescape, whose
# \udc80-\udcff the binary names below cover.
names = st.one_of(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/"), min_size=1,
                          max_size=20),
                  st.binary(min_size=1, max_size=20).filter(lambda b: b"\x00" not in b and b"/" not in b).map(
                      os.fsdecode))


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
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
