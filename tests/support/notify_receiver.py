#!/usr/bin/env python3
"""A webhook and mail receiver for the notification tests (tests/server/notify_senders_test.cc).

    notify_receiver.py --out FILE [--http-port N] [--smtp-port N] [--http-status CODE]
                       [--smtp-refuse-rcpt "550 5.1.1 no such user"]
                       [--tls-cert PEM --tls-key PEM] [--smtp-auth USER:PASSWORD]

Serves, on 127.0.0.1, an HTTP receiver (--http-port) and/or an SMTP server (--smtp-port, aiosmtpd
from deploy/python-requirements.txt). Port 0 picks a free one; once each listens it prints
"http PORT" / "smtp PORT" on stdout. Everything received is appended to FILE, one JSON object a
line, flushed at once:

    {"kind": "http", "method", "path", "headers": {name: value}, "body"}
    {"kind": "smtp", "mail_from", "rcpt_tos": [...], "data": the message as text,
     "subject": decoded, "message_id", "text": the body decoded, "tls": bool, "auth": login|null}

HTTP POSTs are answered --http-status (default 200). With --smtp-refuse-rcpt every RCPT TO is
answered with that reply. With --tls-cert/--tls-key the HTTP side is HTTPS and the SMTP side offers
STARTTLS; --smtp-auth makes it offer AUTH (after STARTTLS) and accept only that login.
Runs until killed.
"""

import argparse
import asyncio
import email
import email.policy
import http.server
import json
import ssl
import sys
import threading

_lock = threading.Lock()


def record(path, entry):
    with _lock, open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(entry, ensure_ascii=False) + "\n")
        out.flush()


def serve_http(args, tls):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            record(args.out, {"kind": "http", "method": "POST", "path": self.path,
                              "headers": dict(self.headers.items()),
                              "body": body.decode("utf-8", "replace")})
            answer = json.dumps({"status": args.http_status}).encode()
            self.send_response(args.http_status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *unused):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.http_port), Handler)
    if tls:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"http {server.server_address[1]}", flush=True)


async def serve_smtp(args, tls):
    from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword  # only the SMTP side needs it

    class Handler:
        async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
            if args.smtp_refuse_rcpt:
                return args.smtp_refuse_rcpt
            envelope.rcpt_tos.append(address)
            return "250 OK"

        async def handle_DATA(self, server, session, envelope):
            message = email.message_from_bytes(envelope.content, policy=email.policy.default)
            record(args.out, {"kind": "smtp", "mail_from": envelope.mail_from,
                              "rcpt_tos": envelope.rcpt_tos,
                              "mail_options": envelope.mail_options,
                              "data": envelope.content.decode("utf-8", "replace"),
                              "subject": str(message["subject"]),
                              "message_id": str(message["message-id"]),
                              "text": message.get_content(),
                              "tls": session.ssl is not None,
                              "auth": session.auth_data})
            return "250 Message accepted for delivery"

    def authenticator(server, session, envelope, mechanism, auth_data):
        user, _, password = args.smtp_auth.partition(":")
        ok = (isinstance(auth_data, LoginPassword) and auth_data.login == user.encode()
              and auth_data.password == password.encode())
        return AuthResult(success=ok, handled=False, auth_data=user if ok else None)

    options = {"tls_context": tls} if tls else {}
    if args.smtp_auth:
        options["authenticator"] = authenticator
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SMTP(Handler(), hostname="receiver", **options),
                                      host="127.0.0.1", port=args.smtp_port)
    print(f"smtp {server.sockets[0].getsockname()[1]}", flush=True)
    await asyncio.Event().wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--http-port", type=int)
    parser.add_argument("--smtp-port", type=int)
    parser.add_argument("--http-status", type=int, default=200)
    parser.add_argument("--smtp-refuse-rcpt")
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    parser.add_argument("--smtp-auth", help="USER:PASSWORD")
    args = parser.parse_args()
    if args.http_port is None and args.smtp_port is None:
        parser.error("give --http-port, --smtp-port or both")
    tls = None
    if args.tls_cert:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.tls_cert, args.tls_key)
    if args.http_port is not None:
        serve_http(args, tls)
    if args.smtp_port is not None:
        asyncio.run(serve_smtp(args, tls))
    else:
        threading.Event().wait()


if __name__ == "__main__":
    sys.exit(main())
