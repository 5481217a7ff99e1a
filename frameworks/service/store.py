"""The service framework's state in SQLite: its framework id, the apps, and their instances.

Every write is one transaction, so a crash leaves either the old or the new row, never half of
an app. Instances are written before their launch is sent, so a restarted daemon knows every
task it may have started and can reconcile it with the master.
"""

from __future__ import annotations

from agora.frameworks.sdk import StateStore
from agora.frameworks.service.instances import Instance
from agora.v1 import services_pb2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS apps (id TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS instances (
    task_id TEXT PRIMARY KEY, app_id TEXT NOT NULL, data TEXT NOT NULL);
"""


class ServiceStore(StateStore):
    """`path` None keeps everything in memory (a restart forgets it)."""

    SCHEMA = _SCHEMA

    def _write(self, sql: str, args: tuple) -> None:
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute(sql, args)

    # apps --------------------------------------------------------------------------------

    def apps(self) -> list[services_pb2.App]:
        rows = self._db.execute("SELECT data FROM apps ORDER BY id").fetchall()
        return [services_pb2.App.FromString(row[0]) for row in rows]

    def put_app(self, app: services_pb2.App) -> None:
        self._write(
            "INSERT OR REPLACE INTO apps (id, data) VALUES (?, ?)",
            (app.id, app.SerializeToString()),
        )

    def delete_app(self, app_id: str) -> None:
        self._write("DELETE FROM apps WHERE id = ?", (app_id,))

    # instances ---------------------------------------------------------------------------

    def instances(self) -> list[Instance]:
        rows = self._db.execute("SELECT data FROM instances ORDER BY task_id").fetchall()
        return [Instance.loads(row[0]) for row in rows]

    def put_instance(self, instance: Instance) -> None:
        self._write(
            "INSERT OR REPLACE INTO instances (task_id, app_id, data) VALUES (?, ?, ?)",
            (instance.task_id, instance.app_id, instance.dumps()),
        )

    def delete_instance(self, task_id: str) -> None:
        self._write("DELETE FROM instances WHERE task_id = ?", (task_id,))
