"""The Batch API from the command line: found through the master, errors as one line."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from agora.cli.errors import CommandError

if TYPE_CHECKING:  # at run time grpc is imported lazily, where it is used
    import grpc

CALL_TIMEOUT = 15.0


def call_error(e) -> Exception:
    return CommandError(e.details() or e.code().name)


class BatchClient:
    """A Batch stub found through the master."""

    def __init__(self, master: str, credentials, batch: str | None = None) -> None:
        self.master = master
        self.credentials = credentials
        self.batch = batch  # the Batch API's address when given (--batch): no master needed
        self.channel: grpc.Channel | None = None
        self.in_set = False  # the daemon found is one of a highly available set (--zk)
        self.connect()

    def connect(self, address: str | None = None) -> None:
        """(Re)finds the Batch API through the master (after a restart or a failover it may
        have moved), or dials `address` (a standby named the leader)."""
        from agora.frameworks.batch.client import BatchNotFound, find_batch
        from agora.frameworks.sdk.discovery import SET_LABEL

        if address:
            self.address = address
        elif self.batch:
            self.address = self.batch
        else:
            try:
                found = find_batch(self.master, credentials=self.credentials)
            except BatchNotFound as e:
                raise CommandError(str(e)) from None
            self.address = found.info.service_address
            self.in_set = SET_LABEL in found.info.labels
        self._dial()

    def _dial(self) -> None:
        from agora.common.credentials import sync_channel
        from agora.common.rpc import CHANNEL_OPTIONS
        from agora.v1 import batch_pb2_grpc

        if self.channel is not None:
            self.channel.close()
        self.channel = sync_channel(self.address, self.credentials, CHANNEL_OPTIONS)
        self.stub = batch_pb2_grpc.BatchStub(self.channel)

    def __enter__(self) -> BatchClient:
        return self

    def __exit__(self, *exc) -> None:
        assert self.channel is not None  # connect() in __init__ set it
        self.channel.close()

    def call(self, method: str, request, missing_ok: bool = False):
        """The reply; None for NOT_FOUND when `missing_ok`; CommandError naming why else.

        A daemon of a highly available set (`agora batch --zk`) that stands by names the
        leader: the call goes there. While a set fails over (the master still names the leader
        that died, or a standby knows no leader yet), the call is retried for a few seconds
        (cli/set_follow.py)."""
        import grpc

        from agora.cli.set_follow import FAILOVER_WAIT

        deadline = time.monotonic() + FAILOVER_WAIT
        while True:
            try:
                return getattr(self.stub, method)(request, timeout=CALL_TIMEOUT)
            except grpc.RpcError as e:
                if not self._moved(e, deadline, method):
                    return self._failed(e, missing_ok)

    def _moved(self, e, deadline: float, method: str) -> bool:
        """Whether the API moved (a set's failover) and the call is worth another try."""
        from agora.cli.set_follow import next_try

        where = next_try(
            e,
            self.address,
            given=bool(self.batch),
            in_set=self.in_set,
            deadline=deadline,
            method=method,
        )
        if where is None:
            return False
        self.connect(where or None)
        return True

    def _failed(self, e, missing_ok: bool):
        import grpc

        if missing_ok and e.code() == grpc.StatusCode.NOT_FOUND:
            return None
        if e.code() in (
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.DEADLINE_EXCEEDED,
            grpc.StatusCode.UNIMPLEMENTED,
            grpc.StatusCode.UNAUTHENTICATED,
        ):
            from agora.common.failures import Cause, classify_error

            where = "given with --batch" if self.batch else "as published to the master"
            failure = classify_error(
                e, self.address, self.credentials, what="the batch daemon", service="Batch"
            )
            if failure.cause in (Cause.REFUSED, Cause.UNREACHABLE):
                from agora.common.addresses import loopback_published

                if not self.batch and (
                    why := loopback_published(self.address, self.master, "agora batch")
                ):
                    raise CommandError(why) from None
                raise CommandError(
                    f"the batch daemon at {self.address} ({where}) does not answer; is "
                    f"`agora batch` running? ({failure.cause.value})"
                ) from None
            raise CommandError(failure.message) from None
        raise call_error(e) from None


def to_dict(message) -> dict:
    from google.protobuf import json_format

    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def print_json(value) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


def when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) if seconds else "-"
