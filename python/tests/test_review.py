"""``hopscore.Review``, built from keyword arguments like every job, reviews the
questions the CLI's ``hopscore review`` does against the same endpoint and gives the
rows of its output file."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyarrow.parquet as pq
import pytest

import hopscore
from conftest import cli_run, flags

#: Every call's reply: a review that answers, and the final answer's sentence.
REPLY = "Relevance: [RELEVANT]\nSupport: [SUPPORTED]\nAction: [ANSWER] green\nThe answer is green."


class _Model(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint that always gives :data:`REPLY`, counting calls."""

    calls = 0

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).calls += 1
        body = json.dumps({
            "choices": [{"message": {"role": "assistant", "content": REPLY}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture()
def endpoint():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Model)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.parametrize("strategy", ["tor", "allies"])
def test_review_rows_equal_the_cli_output(strategy, endpoint, questions, tmp_path):
    # Each strategy's own search size (the other's flags are refused).
    small = {"depth": 1} if strategy == "tor" else {"beam_depth": 1}
    opts = {"strategy": strategy, "endpoint": endpoint, "llm_model": "m", "concurrency": 2, **small}
    cli_rows, cli_bad = cli_run("review", flags(opts) + ["--no-cache"], questions, tmp_path)
    _Model.calls = 0
    result = hopscore.Review(**opts, no_cache=True).process(pq.read_table(questions))
    assert _Model.calls > 0, "the job called the endpoint"
    assert result.rows.schema.equals(cli_rows.schema, check_metadata=False)
    assert result.rows.to_pylist() == cli_rows.to_pylist()
    assert set(result.rows.column("answer").to_pylist()) == {"green"}
    assert result.quarantine.column("id").to_pylist() == cli_bad.column("id").to_pylist() == ["bad-no-passages"]
    # The file's metadata also names the input file; every other key is the same.
    file_meta = {k: v for k, v in cli_rows.schema.metadata.items()
                 if k not in (b"hopscore.input", b"hopscore.input_rows", b"hopscore.input_sha256", b"hopscore.shard",
                              b"hopscore.run_fingerprint")}
    assert result.rows.schema.metadata == file_meta


def test_review_options_are_checked_by_name():
    with pytest.raises(ValueError, match=r"`review` needs the option `endpoint`"):
        hopscore._native.Job("review", '{"strategy": "tor", "llm_model": "m"}')
    with pytest.raises(ValueError, match=r"--widths \(widths\)"):
        hopscore.Review("tor", "http://127.0.0.1:9", "m", widths=[2, 0])


def test_ctrl_c_stops_a_native_call(questions):
    """Issue 58: Ctrl-C during ``job.process(table)`` was acted on only when the call
    returned (here: after a 600 s request timeout against a server that never answers).
    It now stops the call at its next stop point and raises ``KeyboardInterrupt``."""
    import signal
    import socket
    import subprocess
    import sys

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # accepts, never answers
    port = silent.getsockname()[1]
    # SIGUSR1 dumps every thread's Python stack to stderr: a run that does not stop
    # says where it hung.
    script = (
        "import faulthandler, signal\n"
        "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
        "import hopscore, pyarrow.parquet as pq\n"
        f"job = hopscore.Review('tor', 'http://127.0.0.1:{port}', 'm', timeout=600, max_retries=0)\n"
        "print('ready', flush=True)\n"
        f"job.process(pq.read_table({str(questions)!r}))\n"
        "print('returned', flush=True)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        # Let the calls reach the silent server, then interrupt.
        import time
        time.sleep(1.0)
        child.send_signal(signal.SIGINT)
        try:
            out, err = child.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGUSR1)
            time.sleep(1.0)
            child.kill()
            out, err = child.communicate()
            raise AssertionError(f"Ctrl-C did not stop the call in 60 s; its stacks:\n{err}")
    finally:
        child.kill()
        silent.close()
    assert "KeyboardInterrupt" in err, err
    assert "returned" not in out
