from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class RenewRequest(_message.Message):
    __slots__ = ("csr", "certificate", "signature")
    CSR_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    csr: bytes
    certificate: bytes
    signature: bytes
    def __init__(self, csr: _Optional[bytes] = ..., certificate: _Optional[bytes] = ..., signature: _Optional[bytes] = ...) -> None: ...

class JoinRequest(_message.Message):
    __slots__ = ("token_payload", "csr", "proof")
    TOKEN_PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    CSR_FIELD_NUMBER: _ClassVar[int]
    PROOF_FIELD_NUMBER: _ClassVar[int]
    token_payload: bytes
    csr: bytes
    proof: bytes
    def __init__(self, token_payload: _Optional[bytes] = ..., csr: _Optional[bytes] = ..., proof: _Optional[bytes] = ...) -> None: ...

class JoinResponse(_message.Message):
    __slots__ = ("certificate", "ca", "principal")
    CERTIFICATE_FIELD_NUMBER: _ClassVar[int]
    CA_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    certificate: bytes
    ca: bytes
    principal: str
    def __init__(self, certificate: _Optional[bytes] = ..., ca: _Optional[bytes] = ..., principal: _Optional[str] = ...) -> None: ...
