"""Every writer replaces only regular files (or links): a device, FIFO, socket or folder at the target is
refused in one line, with or without ``--force``, and left as it was; files pulse-jax opens by a fixed
name (the log's ``<log>.returned``) are opened as regular files or refused, never read from a FIFO or a
device; new files follow the umask."""
import os
import socket
import stat
import threading

import pytest

from conftest import cli_fails
from pulse_jax.errors import PulseInputError
from pulse_jax.fileio import files
from pulse_jax.live import Selector, run

BUDGET = 6 * 8 + 8 * 10


def _specials(tmp_path):
    """``{kind: path}``: a FIFO, a folder, a socket and (where this user may make one) a character device
    like /dev/null, all inside ``tmp_path``."""
    out = {}
    os.mkfifo(tmp_path / "fifo")
    out["a FIFO (named pipe)"] = tmp_path / "fifo"
    (tmp_path / "folder").mkdir()
    out["a folder"] = tmp_path / "folder"
    try:
        os.mknod(tmp_path / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        out["a character device"] = tmp_path / "null"
    except OSError:       # not root, or a container that forbids mknod: the other kinds still run
        pass
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "sock"))
        out["a socket"] = tmp_path / "sock"
    except OSError:       # a path too long for a socket address
        pass
    finally:
        sock.close()
    return out


def _unchanged(path, before):
    info = os.lstat(path)
    return (info.st_mode, info.st_ino, info.st_rdev) == before


def _state(path):
    info = os.lstat(path)
    return info.st_mode, info.st_ino, info.st_rdev


def test_the_atomic_writer_refuses_every_special_file_and_leaves_it(tmp_path):
    for kind, path in _specials(tmp_path).items():
        before = _state(path)
        with pytest.raises(PulseInputError) as err:
            files.write_atomically(path, "x")
        assert f"is {kind}, not a regular file" in str(err.value) and "\n" not in str(err.value)
        assert _unchanged(path, before), kind
    assert not list(tmp_path.glob(".*.partial"))


@pytest.mark.parametrize("force", [False, True])
def test_import_long_out_never_replaces_a_device_or_fifo(tmp_path, capsys, force):
    table = tmp_path / "t.csv"
    table.write_text("model,example,score\na,0,1\na,1,0\nb,0,0\nb,1,1\n")
    for kind, path in _specials(tmp_path).items():
        before = _state(path)
        argv = ["import", "long", str(table), "--out", str(path)] + (["--force"] if force else [])
        from pulse_jax import cli

        assert cli.main(argv) == 2, kind
        err = capsys.readouterr().err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert str(path) in err, err
        assert _unchanged(path, before), kind


@pytest.mark.parametrize("force", [False, True])
def test_log_export_never_replaces_a_device_or_fifo(small_bench, tmp_path, capsys, force):
    b, V = small_bench
    log = tmp_path / "run.db"
    with Selector(b.models, 200, BUDGET, batch_size=8, V=V, seed=5, refit_every=0, log=log, stop="budget") as sel:
        run(lambda model, ids: b.scores[b.models.index(model), ids].tolist(), sel, handle_signals=False)
    for kind, path in _specials(tmp_path).items():
        before = _state(path)
        from pulse_jax import cli

        assert cli.main(["log", "export", str(log), "--jsonl", str(path)] + (["--force"] if force else [])) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert _unchanged(path, before), kind


@pytest.mark.parametrize("what", ["fifo", "link to /dev/zero", "folder"])
def test_a_special_file_at_the_logs_returned_spool_is_refused_not_read(small_bench, tmp_path, what):
    """A FIFO at ``<log>.returned`` would block the open; a link to /dev/zero would be read until memory
    runs out. Both are refused in one line naming the file, at once."""
    b, V = small_bench
    spool = tmp_path / "run.db.returned"
    if what == "fifo":
        os.mkfifo(spool)
    elif what == "folder":
        spool.mkdir()
    else:
        spool.symlink_to("/dev/zero")
    outcome = {}

    def start():
        try:
            Selector(b.models, 200, BUDGET, batch_size=8, V=V, seed=5, refit_every=0, log=tmp_path / "run.db",
                     stop="budget").close()
        except PulseInputError as err:
            outcome["error"] = str(err)

    worker = threading.Thread(target=start, daemon=True)
    worker.start()
    worker.join(60)
    if worker.is_alive():     # the FIFO's open blocked: let it go before failing
        os.open(spool, os.O_WRONLY | os.O_NONBLOCK)
        pytest.fail("the selector blocked on the spool")
    assert "run.db.returned" in outcome.get("error", ""), outcome
    assert "\n" not in outcome["error"]


def test_log_show_and_export_of_a_fifo_or_device_say_what_it_is_and_never_block(tmp_path, capsys):
    for kind, path in _specials(tmp_path).items():
        for action in ("show", "export"):
            err = cli_fails(["log", action, str(path)], capsys, f"is {kind}, not a pulse-jax log file")
            assert str(path) in err


def test_written_files_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        files.write_atomically(tmp_path / "a.txt", "x")
        os.umask(0o077)
        files.write_atomically(tmp_path / "b.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "a.txt").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(tmp_path / "b.txt").st_mode) == 0o600


def test_records_read_back_by_a_fixed_name_are_read_only_from_regular_files(tmp_path):
    """report.json and provenance.json are read back to recognise an earlier run's folder: a FIFO under
    either name blocked that read; it is now passed over, at once."""
    import threading

    from pulse_jax.fileio import files

    for name in ("report.json", "provenance.json"):
        os.mkfifo(tmp_path / name)
    got = []
    reader = threading.Thread(target=lambda: got.append((files.read_record(tmp_path / "report.json"),
                                                         files.remove_previous_outputs(tmp_path))), daemon=True)
    reader.start()
    reader.join(5)
    assert got == [(None, [])]
    (tmp_path / "plain.json").write_text('{"log": "x"}')
    assert files.read_record(tmp_path / "plain.json") == '{"log": "x"}'
