"""``pyg_dynscale.commands.launch`` without processes: the machines' options (``--nnodes``, ``--rdzv-endpoint``,
``--rdzv-id``) checked and turned into torchrun's command line, the round token every machine's agent shares,
and the launcher's lines naming a rank's machine (issue 37, item 6). The real launches are in
tests/commands/test_multinode.py."""
from __future__ import annotations

import pytest
import torch.distributed as dist

from pyg_dynscale.cli import build_parser
from pyg_dynscale.commands import launch
from pyg_dynscale.commands.job import check_launch_options
from pyg_dynscale.errors import CommandError
from pyg_dynscale.training.failure import PeerFailedError, failure_text


def _parsed(*argv: str):
    args = build_parser().parse_args(["train", "england_covid", *argv])
    args._argv = ["train", "england_covid", *argv]
    return args


@pytest.mark.parametrize("argv, message", [
    (["--nnodes", "2", "--rdzv-endpoint", "h:29500"], "--nnodes 2 needs --nproc N (processes per machine"),
    (["--nproc", "2", "--nnodes", "2"], "--nnodes 2 needs --rdzv-endpoint HOST:PORT"),
    (["--nproc", "2", "--rdzv-endpoint", "h:29500"], "--rdzv-endpoint h:29500 needs --nnodes M"),
    (["--nproc", "2", "--nnodes", "0", "--rdzv-endpoint", "h:1"], "--nnodes must be >= 1, got 0."),
    (["--nproc", "2", "--nnodes", "2", "--rdzv-endpoint", "h"], "--rdzv-endpoint h: give HOST:PORT"),
    (["--nproc", "2", "--nnodes", "2", "--rdzv-endpoint", "h:99999"], "--rdzv-endpoint h:99999: give HOST:PORT"),
    (["--nproc", "2", "--nnodes", "2", "--rdzv-endpoint", ":29500"], "--rdzv-endpoint :29500: give HOST:PORT"),
    (["--nproc", "2", "--nnodes", "2", "--rdzv-endpoint", "h:1", "--rdzv-id", ""], "--rdzv-id is empty"),
])
def test_machine_options_are_refused_in_one_line(argv, message) -> None:
    with pytest.raises(CommandError) as info:
        check_launch_options(_parsed(*argv))
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)


def test_nnodes_makes_nproc_the_jobs_processes_and_torchrun_meets_at_the_endpoint() -> None:
    args = _parsed("--nproc", "2", "--nnodes", "3", "--rdzv-endpoint", "node001:29500", "--rdzv-id", "j7",
                   "--epochs", "4", "--max-restarts", "1")
    check_launch_options(args)
    assert (args.nproc, args.nproc_per_node) == (6, 2)  # what the later checks and the run record compare
    check_launch_options(args)  # checked twice: unchanged
    assert (args.nproc, args.nproc_per_node) == (6, 2)
    argv = launch.torchrun_argv(args)
    assert argv[:10] == ["--nnodes", "3", "--rdzv-backend", "c10d", "--rdzv-endpoint", "node001:29500",
                         "--rdzv-id", "j7", "--nproc-per-node", "2"]
    assert "--standalone" not in argv and "--node-rank" not in argv
    # the workers get none of the launcher's options
    assert argv[argv.index("-m"):] == ["-m", "pyg_dynscale", "train", "england_covid", "--epochs", "4"]
    assert launch.worker_argv(["train", "x", "--nnodes=2", "--rdzv-id", "a", "--rdzv-endpoint", "h:1", "--json"]) \
        == ["train", "x", "--json"]


def test_one_machine_stays_standalone() -> None:
    args = _parsed("--nproc", "2")
    check_launch_options(args)
    argv = launch.torchrun_argv(args)
    assert argv[:3] == ["--standalone", "--nproc-per-node", "2"] and args.nproc == 2
    args = _parsed("--nproc", "2", "--nnodes", "1")
    check_launch_options(args)
    assert launch.torchrun_argv(args)[:3] == ["--standalone", "--nproc-per-node", "2"] and args.nproc == 2


def test_every_agent_of_a_round_reads_the_same_token_and_the_next_round_another() -> None:
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    round1 = [dist.PrefixStore("torch.rendezvous.job.1", server) for _ in range(2)]
    tokens = [launch.round_token(s) for s in round1]
    assert tokens[0] == tokens[1] and len(tokens[0]) == 32
    assert launch.round_token(dist.PrefixStore("torch.rendezvous.job.2", server)) != tokens[0]


def test_lines_name_the_machine_of_a_rank(monkeypatch) -> None:
    monkeypatch.setattr(launch, "_launched", {})
    assert launch.restart_line((1, -9, "killed by signal SIGKILL"), 2, 2) == \
        "pyg-dynscale train: rank 1 died (SIGKILL); restarting, attempt 2 of 2"  # one machine: no node
    monkeypatch.setattr(launch, "_launched", {"node": 1, "nodes": 2, "host": "gpu07"})
    assert launch.restart_line((3, -9, "killed by signal SIGKILL"), 2, 2) == \
        "pyg-dynscale train: rank 3 (node 1, host gpu07) died (SIGKILL); restarting, attempt 2 of 2"


def test_a_rank_that_failed_on_another_machine_is_the_cause_here(monkeypatch, tmp_path) -> None:
    """The ranks of this machine only stopped (they recorded :class:`PeerFailedError`): the launcher's line
    names the other machine's rank and its cause; a rank of this machine with a cause of its own is preferred."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ErrorHandler, ProcessFailure

    monkeypatch.setattr(launch, "_launched", {})
    monkeypatch.setenv("GROUP_WORLD_SIZE", "1")  # no store to look the node up in: the rank alone

    def failure(rank: int, exc: BaseException) -> ProcessFailure:
        path = tmp_path / f"error{rank}.json"
        monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
        ErrorHandler().record_exception(exc)
        return ProcessFailure(local_rank=rank, pid=100 + rank, exitcode=1, error_file=str(path))

    peers = {r: failure(r, PeerFailedError(2, "RuntimeError: boom")) for r in (0, 1)}
    rank, code, cause = launch._job_failure(ChildFailedError(name="x", failures=peers))
    assert (rank, code, cause) == (None, 1, "rank 2 failed: RuntimeError: boom (noticed by rank 0)")
    mixed = {0: peers[0], 1: failure(1, RuntimeError("mine"))}
    rank, code, cause = launch._job_failure(ChildFailedError(name="x", failures=mixed))
    assert (rank, cause) == (1, "RuntimeError: mine")


def test_a_published_failure_as_peers_say_it(monkeypatch) -> None:
    monkeypatch.setenv("GROUP_WORLD_SIZE", "1")
    assert failure_text(2, "RuntimeError: boom") == "rank 2 failed: RuntimeError: boom"
    silent = "node 1 (host h: ranks 2, 3) stopped answering: no heartbeat for 3 s"
    assert failure_text(2, silent) == silent  # it names who failed itself
    assert failure_text(1, "rank 1 stopped answering: no heartbeat") == "rank 1 stopped answering: no heartbeat"


def test_torchrun_stops_the_workers_within_the_shutdown_timeout_and_the_job_within_its_deadline() -> None:
    """torchrun's own machinery bounds the end of a job: its agent looks every MONITOR_SECONDS and sends SIGKILL
    SHUTDOWN_SECONDS after its SIGTERM (torch's default, 30 s, is what a stopped rank added to the job);
    stop_deadline is the whole bound (issue 38, item 6: within --timeout + 10 s)."""
    argv = launch.torchrun_argv(_parsed("--nproc", "2"))
    assert argv[argv.index("--shutdown-timeout") + 1] == str(launch.SHUTDOWN_SECONDS)
    assert float(argv[argv.index("--monitor-interval") + 1]) == launch.MONITOR_SECONDS
    from torch.distributed.run import get_args_parser

    parsed = get_args_parser().parse_args(argv)  # torchrun takes them
    assert parsed.shutdown_timeout == launch.SHUTDOWN_SECONDS and parsed.monitor_interval == launch.MONITOR_SECONDS
    for timeout in (10, 120):
        assert timeout < launch.stop_deadline(timeout) <= timeout + 10
    assert launch.stop_deadline(10) == pytest.approx(10 + 3 + 0.4 + launch.SHUTDOWN_SECONDS)


def test_a_restart_stops_the_workers_with_the_shutdown_timeout() -> None:
    import signal

    class Agent:  # LocalElasticAgent's part that _reporting_agent builds on
        _shutdown_timeout = launch.SHUTDOWN_SECONDS

        def __init__(self) -> None:
            self.calls = []

        def _stop_workers(self, worker_group) -> None:
            self._shutdown()

        def _shutdown(self, death_sig=signal.SIGTERM, timeout: int = 30) -> None:
            self.calls.append(timeout)

    agent = launch._reporting_agent(Agent, "pyg-dynscale train-events")()
    agent._stop_workers(None)
    assert agent.calls == [launch.SHUTDOWN_SECONDS]  # not torch's 30 s


def _failures(monkeypatch, tmp_path, recorded: dict) -> dict:
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler, ProcessFailure

    out = {}
    for rank, (exc, code) in recorded.items():
        path = tmp_path / f"error{rank}.json"
        monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
        ErrorHandler().record_exception(exc)
        out[rank] = ProcessFailure(local_rank=rank, pid=100 + rank, exitcode=code, error_file=str(path))
    return out


def test_an_input_error_is_one_line_as_one_process_says_it(monkeypatch, tmp_path) -> None:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    monkeypatch.setattr(launch, "_launched", {})
    line = "--resume: the checkpoint ck/epoch-000001 was written by another run (lr: ...); resume with --lr 0.01."
    same = _failures(monkeypatch, tmp_path, {0: (CommandError(line), 2), 1: (CommandError(line), 2)})
    assert launch.input_error_line(ChildFailedError(name="x", failures=same), "pyg-dynscale train-events") == \
        f"pyg-dynscale train-events: error: {line}"
    # ranks that refused different things (their data differ): the first, with its rank; a stopped peer is no refusal
    other = _failures(monkeypatch, tmp_path, {0: (RuntimeError("stopped"), -15), 1: (CommandError("a"), 2),
                                              2: (CommandError("b"), 2)})
    assert launch.input_error_line(ChildFailedError(name="x", failures=other), "pyg-dynscale train") == \
        "pyg-dynscale train: error (rank 1): a"
    crashed = _failures(monkeypatch, tmp_path, {0: (RuntimeError("boom"), 1)})
    assert launch.input_error_line(ChildFailedError(name="x", failures=crashed)) is None
    assert launch.restart_line((1, 2, "CommandError: a"), 2, 3, "pyg-dynscale train-events") == \
        "pyg-dynscale train-events: rank 1 failed (exit code 2): CommandError: a; restarting, attempt 2 of 3"
