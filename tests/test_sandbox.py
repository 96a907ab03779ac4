"""Sandboxes with real subprocesses: results, persistence, confinement and limits."""

from __future__ import annotations

import json
import os
import socket
import threading
from importlib import resources

import pytest

from tangram.runtime.sandbox import Command, Limits, Sandboxes, _reason

FAST = Limits(timeout_s=10, cpu_s=10, memory_mb=512, processes=32, file_size_mb=1)


@pytest.fixture
def boxes(tmp_path):
    """Sandboxes of one node under a temporary root, with the strongest isolation here."""
    b = Sandboxes(tmp_path / "boxes", limits=FAST)
    yield b
    b.close_all()


def mbpp(task_id: int) -> dict:
    with resources.files("tangram.data").joinpath("mbpp.jsonl").open() as f:
        return next(p for p in map(json.loads, f) if p["task_id"] == task_id)


def confined(boxes: Sandboxes) -> None:
    if boxes.isolation == "none":
        pytest.skip("no network or filesystem isolation on this machine (install bubblewrap)")


def test_mbpp_solution_passes_its_asserts_and_a_wrong_one_fails(boxes):
    p = mbpp(2)
    program = "\n".join([p["test_setup_code"], p["code"], *p["test_list"]])
    good = boxes.run("traj", Command(code=program), cores=[0])
    assert good.reason == "ok" and good.exit_code == 0, good.stderr
    wrong = p["code"].replace("return", "return None and ", 1)
    bad = boxes.run("traj", Command(code="\n".join([wrong, *p["test_list"]])), cores=[0])
    assert bad.reason == "nonzero_exit" and bad.exit_code == 1
    assert "AssertionError" in bad.stderr
    assert bad.started_at >= bad.queued_at and bad.ended_at > bad.started_at and bad.cpu_s >= 0


def test_state_persists_across_actions_and_close_removes_it(boxes):
    boxes.run("traj", Command(code="open('notes.txt', 'w').write('step one')"), cores=[0])
    r = boxes.run("traj", Command(argv=("cat", "notes.txt")), cores=[0])
    assert r.stdout == "step one"
    other = boxes.run("other", Command(argv=("ls",)), cores=[0])
    assert "notes.txt" not in other.stdout
    path = boxes.path("traj")
    assert boxes.close("traj") and not path.exists() and "traj" not in boxes
    assert not boxes.close("traj")


def test_concurrent_code_actions_of_one_trajectory_keep_their_own_program(boxes):
    results = {}

    def run(k: int) -> None:
        results[k] = boxes.run("traj", Command(code=f"import time; time.sleep(0.2); print({k})"), cores=[0])

    threads = [threading.Thread(target=run, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {k: r.stdout.strip() for k, r in results.items()} == {0: "0", 1: "1", 2: "2"}
    assert not list(boxes.path("traj").glob("_run_*.py"))  # each program is removed after its run


def test_cores_are_pinned_as_granted(boxes):
    core = sorted(os.sched_getaffinity(0))[-1]
    r = boxes.run("traj", Command(code="import os; print(sorted(os.sched_getaffinity(0)))"), cores=[core])
    assert json.loads(r.stdout) == [core] and r.cores == (core,)


def test_no_network_even_to_a_listening_local_port(boxes):
    confined(boxes)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2); print('reached')"
        r = boxes.run("traj", Command(code=probe), cores=[0])
    assert r.reason == "nonzero_exit" and "reached" not in r.stdout
    assert "ConnectionRefused" in r.stderr or "unreachable" in r.stderr.lower() or "timed out" in r.stderr


def test_cannot_write_outside_the_sandbox(boxes, tmp_path):
    confined(boxes)
    outside = tmp_path / "escaped.txt"
    code = (f"import pathlib\nfor p in ['{outside}', '/usr/escaped.txt', '{boxes.root}/escaped.txt']:\n"
            "    try:\n        pathlib.Path(p).write_text('x'); print('wrote', p)\n"
            "    except OSError as e:\n        print('refused', p)\n")
    r = boxes.run("traj", Command(code=code), cores=[0])
    assert r.reason == "ok" and "wrote" not in r.stdout, r.stdout + r.stderr
    assert not outside.exists() and not (boxes.root / "escaped.txt").exists()


def test_environment_is_scrubbed(boxes, monkeypatch):
    monkeypatch.setenv("TANGRAM_SECRET_TOKEN", "s3cret")
    r = boxes.run("traj", Command(code="import os; print(sorted(os.environ))", env={"MODE": "x"}), cores=[0])
    assert "TANGRAM_SECRET_TOKEN" not in r.stdout and "MODE" in r.stdout


def test_limits_kill_only_the_offending_action(boxes, tmp_path):
    """A timeout, a memory hog and a fork bomb each end with their reason while a
    concurrent well-behaved action in another sandbox completes normally."""
    marker = boxes.open("sleeper") / "late.txt"
    cases = {
        # The background child would write a file after the timeout: the whole group dies.
        "sleeper": Command(argv=("sh", "-c", "(sleep 3; echo late > late.txt) & sleep 30"),
                           limits=FAST.model_copy(update={"timeout_s": 1.0})),
        "hog": Command(code="x = bytearray(2 * 1024 ** 3)"),
        "forker": Command(code="import os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(20)\n",
                          limits=FAST.model_copy(update={"processes": 8, "timeout_s": 4.0})),
        "spinner": Command(code="while True: pass", limits=FAST.model_copy(update={"cpu_s": 1})),
        "good": Command(code="import time; time.sleep(0.5); print(sum(range(10 ** 6)))"),
    }
    results = {}

    def run(name):
        results[name] = boxes.run(name, cases[name], cores=[0])

    threads = [threading.Thread(target=run, args=(n,)) for n in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["good"].reason == "ok" and results["good"].stdout.strip() == str(sum(range(10 ** 6)))
    assert results["sleeper"].reason == "timeout" and results["sleeper"].wall_s < 3
    assert results["hog"].reason == "memory"
    assert results["spinner"].reason == "timeout" and results["spinner"].cpu_s >= 0.9
    if os.geteuid() != 0 or boxes.isolation == "bwrap":  # root outside bwrap is exempt from RLIMIT_NPROC
        assert "Resource temporarily unavailable" in results["forker"].stderr
    assert results["forker"].reason in ("nonzero_exit", "timeout")
    threading.Event().wait(2.5)
    assert not marker.exists()


def test_output_is_bounded_and_flagged(boxes):
    small = FAST.model_copy(update={"output_bytes": 1000})
    r = boxes.run("traj", Command(code="import sys; print('x' * 5000); sys.stderr.write('e' * 10)", limits=small),
                  cores=[0])
    assert len(r.stdout) == 1000 and r.stdout_truncated and r.stderr == "e" * 10 and not r.stderr_truncated


def test_file_size_limit_and_stdin(boxes):
    r = boxes.run("traj", Command(code="open('big', 'wb').write(b'0' * (2 * 1024 ** 2))"), cores=[0])
    assert r.reason == "nonzero_exit" and "File too large" in r.stderr
    echo = boxes.run("traj", Command(argv=("cat",), stdin="hello"), cores=[0])
    assert echo.stdout == "hello"


def test_files_cannot_escape(boxes):
    with pytest.raises(ValueError, match="leaves the sandbox"):
        boxes.run("traj", Command(argv=("true",), files={"../x": "y"}), cores=[0])


def test_fallback_without_isolation_still_limits(tmp_path):
    boxes = Sandboxes(tmp_path / "plain", limits=FAST, isolation="none")
    r = boxes.run("t", Command(code="import os; print(os.getcwd())"), cores=[0])
    assert r.reason == "ok" and r.stdout.strip() == str(boxes.path("t")) and r.isolation == "none"
    t = boxes.run("t", Command(argv=("sleep", "10"), limits=FAST.model_copy(update={"timeout_s": 0.5})), cores=[0])
    assert t.reason == "timeout"


@pytest.mark.parametrize("code,timed_out,stderr,reason", [
    (0, False, "", "ok"),
    (1, False, "AssertionError", "nonzero_exit"),
    (1, False, "MemoryError", "memory"),
    (-9, True, "", "timeout"),
    (-24, False, "", "timeout"),
    (-9, False, "", "killed"),
    (-6, False, "std::bad_alloc", "memory"),
])
def test_reason_table(code, timed_out, stderr, reason):
    assert _reason(code, timed_out, stderr) == reason


def test_kill_by_key_ends_the_action_as_killed(boxes):
    done = {}
    t = threading.Thread(target=lambda: done.update(r=boxes.run("traj", Command(argv=("sleep", "20")), cores=[0],
                                                                    key="a1")))
    t.start()
    for _ in range(100):
        if boxes.kill("a1"):
            break
        threading.Event().wait(0.05)
    t.join(10)
    assert done["r"].reason == "killed" and done["r"].wall_s < 10 and not boxes.kill("a1")
