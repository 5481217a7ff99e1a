"""`agora tls init DIR`, `agora tls issue ...` and `agora tls token ...`: a certificate
authority, certificates, and bearer tokens for whom a certificate is impractical."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from agora.cli.errors import CommandError
from agora.cli.options import duration


def _days(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of days") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"days must be at least 1, got {value}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tls",
        help="create a certificate authority and certificates for mutual TLS",
        description="Creates the certificates every daemon and client presents for mutual TLS "
        "(--tls-ca, --tls-cert, --tls-key). A certificate's common name is its holder's "
        "principal, the name ACLs use.",
    )
    sub = parser.add_subparsers(dest="tls_command", metavar="SUBCOMMAND")
    sub.required = True

    p = sub.add_parser(
        "init",
        help="create a certificate authority in DIR",
        description="Creates DIR/ca.pem (give it to every daemon and client as --tls-ca) and "
        "DIR/ca-key.pem (keep it secret: it signs certificates; it is written mode 0600).",
    )
    p.add_argument("dir", type=Path, metavar="DIR")
    p.add_argument("--name", default="Agora CA", help="the CA's common name (default Agora CA)")
    p.add_argument("--days", type=_days, default=3650, help="validity (default 3650 days)")
    p.add_argument("--force", action="store_true", help="replace an existing CA in DIR")
    p.add_argument("--json", action="store_true", help="print the written paths as JSON")
    p.set_defaults(func=_init)

    p = sub.add_parser(
        "issue",
        help="issue a certificate and key signed by a CA",
        description="Writes NAME.pem and NAME-key.pem (mode 0600), signed by the CA in --ca. "
        "Certificates for a master, agent, relay or framework also name localhost, 127.0.0.1 "
        "and ::1, and every --host, so clients can verify the daemon's address.",
    )
    p.add_argument("--ca", type=Path, required=True, metavar="DIR", help="the CA's directory")
    p.add_argument("--name", required=True, help="the principal (the certificate's common name)")
    p.add_argument(
        "--for",
        dest="kind",
        required=True,
        choices=["master", "agent", "relay", "framework", "client"],
        help="who presents it: a daemon (serves and dials) or a client (a person or script)",
    )
    p.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="HOST",
        help="a DNS name or IP address the daemon is reached at (repeat for several)",
    )
    p.add_argument("--out", type=Path, metavar="DIR", help="where to write (default: the CA's)")
    p.add_argument("--days", type=_days, default=825, help="validity (default 825 days)")
    p.add_argument("--force", action="store_true", help="replace an existing NAME.pem")
    p.add_argument("--json", action="store_true", help="print the written paths as JSON")
    p.set_defaults(func=_issue)

    p = sub.add_parser(
        "token",
        help="make a bearer token for a framework or a person",
        description="Writes a new random token to FILE (mode 0600) for principal NAME, and "
        "prints the line to add to the --tokens file of the master (and of any daemon the "
        "holder calls). The token itself is never printed: give FILE to --token-file or "
        "$AGORA_TOKEN_FILE.",
    )
    p.add_argument("--name", required=True, help="the principal the token stands for")
    p.add_argument("--out", type=Path, required=True, metavar="FILE", help="the token's file")
    p.add_argument("--json", action="store_true", help="print the principal and digest as JSON")
    p.set_defaults(func=_token)

    p = sub.add_parser(
        "join-token",
        help="make a one-time token that lets a new machine join and get its certificate",
        description="Writes to FILE (mode 0600) a token for principal NAME: copy it to the new "
        "machine and start its daemon with --join FILE (`agora agent --master HOST:PORT --join "
        "FILE`). The daemon makes its own key, and the master (started with --join-ca DIR) "
        "signs its certificate. A token works once, until --ttl has passed; it never appears "
        "on a command line or in a log.",
    )
    p.add_argument("--ca", type=Path, required=True, metavar="DIR", help="the CA's directory")
    p.add_argument("--name", required=True, help="the principal the certificate will name")
    p.add_argument(
        "--for",
        dest="kind",
        required=True,
        choices=["agent", "framework"],
        help="the daemon that will join (a relay takes a certificate from `agora tls issue`)",
    )
    p.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="HOST",
        help="a DNS name or IP address to name in the certificate besides the address the "
        "master sees the machine join from (repeat for several)",
    )
    p.add_argument("--ttl", type=duration, default=3600.0, metavar="DURATION",
                   help="how long the token may be used, e.g. 30m (default 1h)")  # fmt: skip
    p.add_argument("--out", type=Path, required=True, metavar="FILE", help="the token's file")
    p.add_argument("--json", action="store_true", help="print the file, name and expiry as JSON")
    p.set_defaults(func=_join_token)


def _report(args: argparse.Namespace, issued, hint: str) -> int:
    if args.json:
        print(json.dumps({"cert": str(issued.cert), "key": str(issued.key)}))
    else:
        print(f"wrote {issued.cert} and {issued.key}\n{hint}")
    return 0


def _init(args: argparse.Namespace) -> int:
    from agora.common.certificates import CertificateError, init_ca

    try:
        issued = init_ca(args.dir, name=args.name, days=args.days, force=args.force)
    except (CertificateError, OSError) as e:
        raise CommandError(str(e)) from None
    return _report(
        args,
        issued,
        f"next: agora tls issue --ca {args.dir} --name master --for master --host HOST",
    )


def _token(args: argparse.Namespace) -> int:
    from agora.common.tokens import digest, new_token, write_token_file

    if not args.name or any(c.isspace() or c in ":#" for c in args.name):
        raise CommandError(f"--name {args.name!r}: a principal has no spaces, ':' or '#'")
    token = new_token()
    try:
        write_token_file(args.out, token)
    except FileExistsError:
        raise CommandError(
            f"{args.out} exists: pick another file (a token is never replaced)"
        ) from None
    except OSError as e:
        raise CommandError(f"cannot write {args.out}: {e.strerror or e}") from None
    line = f"{args.name}: {digest(token)}"
    if args.json:
        print(json.dumps({"principal": args.name, "digest": digest(token), "file": str(args.out)}))
    else:
        print(f"wrote a token for {args.name} to {args.out} (mode 0600)")
        print(f"add to the --tokens file of the daemons it calls:\n  {line}")
    return 0


def _join_token(args: argparse.Namespace) -> int:
    import time

    from agora.common import join_tokens
    from agora.common.certificates import CertificateAuthority, CertificateError, check_names

    try:
        ca = CertificateAuthority(args.ca)
        check_names(args.name, args.host)  # wrong here, not on the new machine at its join
        token = join_tokens.make(
            ca.token_key, ca.cert_pem, args.name, args.kind, args.ttl, args.host
        )
    except (CertificateError, join_tokens.JoinTokenError) as e:
        raise CommandError(str(e)) from None
    try:
        fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise CommandError(f"{args.out} exists: pick another file") from None
    except OSError as e:
        raise CommandError(f"cannot write {args.out}: {e.strerror or e}") from None
    with os.fdopen(fd, "w") as f:
        f.write(token.encode() + "\n")
    until = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(token.expires))
    if args.json:
        print(json.dumps({"file": str(args.out), "name": args.name, "kind": args.kind,
                          "expires": token.expires}))  # fmt: skip
    else:
        print(f"wrote a join token for {args.kind} {args.name} to {args.out} (mode 0600), "
              f"usable once until {until}")  # fmt: skip
        print(f"on the new machine: agora {args.kind if args.kind != 'framework' else 'batch'} "
              f"--master MASTER:5050 --join {args.out.name} ...")  # fmt: skip
    return 0


def _issue(args: argparse.Namespace) -> int:
    from agora.common.certificates import CertificateError, issue

    try:
        issued = issue(
            args.ca,
            args.name,
            args.kind,
            hosts=args.host,
            out_dir=args.out,
            days=args.days,
            force=args.force,
        )
    except (CertificateError, OSError) as e:
        raise CommandError(str(e)) from None
    ca = args.ca / "ca.pem"
    return _report(
        args, issued, f"use: --tls-ca {ca} --tls-cert {issued.cert} --tls-key {issued.key}"
    )
