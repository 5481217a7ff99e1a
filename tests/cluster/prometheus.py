"""A real Prometheus server (Debian's `prometheus` package) that scrapes given targets."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    def __init__(self, root: Path, targets: dict[str, list[str]], interval: str = "1s") -> None:
        self.root = Path(root)
        self.targets = targets
        self.interval = interval
        self.port = _free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> Prometheus:
        self.root.mkdir(parents=True, exist_ok=True)
        jobs = "".join(
            f"  - job_name: {job}\n    static_configs:\n      - targets: {json.dumps(addrs)}\n"
            for job, addrs in self.targets.items()
        )
        config = self.root / "prometheus.yml"
        config.write_text(
            f"global:\n  scrape_interval: {self.interval}\n  evaluation_interval: 1s\n"
            f"scrape_configs:\n{jobs}"
        )
        log = open(self.root / "prometheus.log", "ab")  # noqa: SIM115 - owned by the process
        self.process = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={self.root / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as reply:
                    if reply.status == 200:
                        return self
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    "prometheus did not start:\n" + (self.root / "prometheus.log").read_text()
                )
            time.sleep(0.1)

    def query(self, promql: str) -> list[tuple[dict[str, str], float]]:
        """An instant query through the HTTP API: [(labels, value)]."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as reply:
            body = json.load(reply)
        assert body["status"] == "success", body
        return [(r["metric"], float(r["value"][1])) for r in body["data"]["result"]]

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
