"""A copy written over a running log (``cp backup.db run.db``) is detected at the next commit: what the run
holds is saved whole beside it, the run stops asking with one line, and nothing told or paid is lost."""
import shutil

import pytest

from pulse_jax import live
from pulse_jax.errors import PulseInputError
from pulse_jax.live import journal

MODELS = ["a", "b", "c"]


def _selector(log):
    return live.Selector(MODELS, 40, 120, method="ucbe", batch_size=4, seed=3, refit_every=0, stop="budget", log=log)


def _score(model, example) -> float:
    return float((int(example) * (2 + MODELS.index(model))) % 7 < 4)


def _tell(sel, k):
    for _ in range(k):
        r = sel.ask()
        sel.tell(r, [_score(r.model, e) for e in r.example_ids])


def _copy_over(source, target):
    """What ``cp source target`` does to a file that exists: truncate it and write into the same inode."""
    with open(source, "rb") as src, open(target, "r+b") as dst:
        dst.truncate(0)
        shutil.copyfileobj(src, dst)


@pytest.mark.parametrize("torn", [False, True])
def test_a_backup_copied_over_a_running_log_is_detected_and_nothing_is_lost(tmp_path, torn):
    log = tmp_path / "run.db"
    sel = _selector(log)
    _tell(sel, 4)
    shutil.copyfile(log, tmp_path / "backup.db")
    _tell(sel, 3)
    r = sel.ask()
    if torn:      # the copy caught half way: the file holds its first page only
        with open(tmp_path / "backup.db", "rb") as src, open(log, "r+b") as dst:
            dst.truncate(0)
            dst.write(src.read(4096))
    else:
        _copy_over(tmp_path / "backup.db", log)
    backup_bytes = log.read_bytes()
    sel.log_paid(r, [_score(r.model, e) for e in r.example_ids])   # the next commit meets the copy
    with pytest.raises(PulseInputError) as err:
        sel.ledger.can_pay()
    message = str(err.value)
    assert "\n" not in message and "the log was replaced while this run was writing it" in message
    assert "run.db.kept" in message
    told = sel.evaluated()
    sel.close()
    assert log.read_bytes() == backup_bytes                     # the file put there is left as it is
    kept = tmp_path / "run.db.kept"
    header, records = journal.snapshot(kept)
    assert sum(len(x["examples"]) for x in records if x["type"] == "tell") == 7 * 4
    assert [x["ticket"] for x in records if x["type"] == "paid"] == [r.ticket]
    kept.replace(log)                                           # the user keeps the run's log, and resumes
    again = _selector(log)
    assert again.evaluated() == told and again.ledger.paid_held == 4
    nxt = again.ask()
    assert nxt.ticket == r.ticket and again.ledger.paid_scores(nxt) is not None   # told from the log, not paid again
    again.close()


def test_a_backup_copied_over_after_the_last_commit_is_found_as_the_log_is_let_go(tmp_path):
    """The copy lands after the run's last commit (it is writing its report): closing the log finds it,
    saves what the run holds beside it and says so, instead of leaving the stale copy as the log."""
    log = tmp_path / "run.db"
    sel = _selector(log)
    _tell(sel, 3)
    shutil.copyfile(log, tmp_path / "backup.db")
    _tell(sel, 2)
    _copy_over(tmp_path / "backup.db", log)
    backup_bytes = log.read_bytes()
    sel.close()
    assert "the log was replaced while this run was writing it" in sel.ledger.replaced
    assert log.read_bytes() == backup_bytes
    header, records = journal.snapshot(tmp_path / "run.db.kept")
    assert sum(len(x["examples"]) for x in records if x["type"] == "tell") == 5 * 4


def test_a_log_left_alone_is_let_go_without_a_word(tmp_path):
    sel = _selector(tmp_path / "run.db")
    _tell(sel, 5)
    sel.close()
    assert not sel.ledger.replaced and not (tmp_path / "run.db.kept").exists()
