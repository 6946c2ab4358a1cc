"""gRPC through weir with a real gRPC implementation on both sides (grpcio, C-GRPC-1..4).

Three grpcio servers on 127.0.0.1 (h2c), a real weir (or weir-smol) in front, a grpcio client:
per-call balancing on one channel, the four call shapes, a 4 MiB message, a backend's status with
its message and trailing metadata, a deadline the backend sees cancelled, a NOT_SERVING backend
taken out by `health_check.mode: grpc`, weir's own UNAVAILABLE and RESOURCE_EXHAUSTED. Then TLS on
both sides (C-GRPC-5): a grpcio client over TLS (ALPN h2) to weir's TLS listener, grpcio servers
serving TLS as `protocol: h2` backends verified against a CA the test makes (openssl), and a
backend whose certificate another CA signed getting no call.

Usage: python interop.py PATH_TO_WEIR_BINARY   (scripts/grpc-interop runs it for both binaries)
"""

import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import types
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

MIB = 1024 * 1024
# A 4 MiB message plus its framing exceeds grpcio's default 4 MiB limit on both sides.
BIG = [("grpc.max_receive_message_length", 8 * MIB), ("grpc.max_send_message_length", 8 * MIB)]
failures = []


def check(ok, what):
    print(("  ok  " if ok else "  FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def until(what, cond, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for: {what}")


class Backend:
    """One grpcio server: `demo.Echo` (Who, Echo in four shapes, Fail, Slow) and the health service."""

    def __init__(self, name, tls=None):
        self.name = name
        self.calls = 0
        self.cancelled_after = []
        self.lock = threading.Lock()
        h = {
            "Who": grpc.unary_unary_rpc_method_handler(self.who),
            "Echo": grpc.unary_unary_rpc_method_handler(lambda req, ctx: self.count() or req),
            "Split": grpc.unary_stream_rpc_method_handler(self.split),
            "Join": grpc.stream_unary_rpc_method_handler(lambda it, ctx: self.count() or b"".join(it)),
            "Bidi": grpc.stream_stream_rpc_method_handler(lambda it, ctx: self.count() or (m.upper() for m in it)),
            "Fail": grpc.unary_unary_rpc_method_handler(self.fail),
            "Slow": grpc.unary_unary_rpc_method_handler(self.slow),
        }
        self.server = grpc.server(futures.ThreadPoolExecutor(16), options=BIG)
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("demo.Echo", h),))
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.serving(True)
        if tls:
            creds = grpc.ssl_server_credentials([(open(tls.key, "rb").read(), open(tls.cert, "rb").read())])
            self.port = self.server.add_secure_port("127.0.0.1:0", creds)
        else:
            self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def count(self):
        with self.lock:
            self.calls += 1

    def serving(self, on):
        status = health_pb2.HealthCheckResponse.SERVING if on else health_pb2.HealthCheckResponse.NOT_SERVING
        self.health.set("", status)

    def who(self, req, ctx):
        self.count()
        return self.name.encode()

    def split(self, req, ctx):
        self.count()
        for b in req:
            yield bytes([b])

    def fail(self, req, ctx):
        self.count()
        ctx.set_trailing_metadata((("x-why", "because"), ("detail-bin", b"\x00\x01\xff")))
        ctx.abort(grpc.StatusCode.NOT_FOUND, "no such thing")

    def slow(self, req, ctx):
        self.count()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 5:
            if not ctx.is_active():
                self.cancelled_after.append(time.monotonic() - t0)
                return b""
            time.sleep(0.01)
        return b"late"


def weir(binary, backends, extra="", server="", mode="grpc", tls=False):
    d = tempfile.mkdtemp(prefix="weir-grpcio-")
    cfg = os.path.join(d, "weir.yaml")
    scheme, protocol = ("https", "h2") if tls else ("http", "h2c")
    with open(cfg, "w") as f:
        f.write(
            "server:\n  port: \"8080\"\n"
            + server
            + f"health_check:\n  mode: {mode}\n  interval: 300ms\n  timeout: 250ms\n  jitter: 0s\n"
            "  failure_threshold: 1\n  slow_start: 0s\n"
            + extra
            + "backends:\n"
            + "".join(
                f"  - id: {b.name}\n    url: {scheme}://127.0.0.1:{b.port}\n    protocol: {protocol}\n" for b in backends
            )
        )
    ready = os.path.join(d, "ready.json")
    log = open(os.path.join(d, "weir.log"), "w")
    p = subprocess.Popen(
        [binary, "run", "--config", cfg, "--public-bind", "127.0.0.1:0", "--ready-file", ready, "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    until("weir's ready file", lambda: os.path.exists(ready) and "public" in open(ready).read())
    addr = json.load(open(ready))["public"]
    return p, addr, os.path.join(d, "weir.log")


def main(binary):
    print(f"grpcio {grpc.__version__} through {binary}", flush=True)
    bs = [Backend(f"g{i}") for i in (1, 2, 3)]
    p, addr, log = weir(binary, bs)
    try:
        ch = grpc.insecure_channel(addr, options=BIG)
        who = ch.unary_unary("/demo.Echo/Who")

        def spread(n):
            return dict(collections.Counter(who(b"", timeout=5).decode() for _ in range(n)))

        until("every backend serving through weir", lambda: len(spread(6)) == 3)
        got = spread(30)
        check(got == {"g1": 10, "g2": 10, "g3": 10}, f"30 unary calls on one channel land 10/10/10: {got}")

        big = os.urandom(4 * MIB)
        check(ch.unary_unary("/demo.Echo/Echo")(big, timeout=20) == big, "a 4 MiB message comes back whole")
        parts = list(ch.unary_stream("/demo.Echo/Split")(b"abc", timeout=5))
        check(parts == [b"a", b"b", b"c"], f"server streaming: {parts}")
        joined = ch.stream_unary("/demo.Echo/Join")(iter([b"x", b"y", b"z"]), timeout=5)
        check(joined == b"xyz", f"client streaming: {joined!r}")
        echoed = list(ch.stream_stream("/demo.Echo/Bidi")(iter([b"a", b"b", b"c"]), timeout=5))
        check(echoed == [b"A", b"B", b"C"], f"bidi streaming: {echoed}")

        try:
            ch.unary_unary("/demo.Echo/Fail")(b"", timeout=5)
            check(False, "NOT_FOUND expected")
        except grpc.RpcError as e:
            md = dict(e.trailing_metadata())
            check(
                e.code() == grpc.StatusCode.NOT_FOUND and e.details() == "no such thing"
                and md.get("x-why") == "because" and md.get("detail-bin") == b"\x00\x01\xff",
                f"a backend's NOT_FOUND arrives with its message and trailing metadata: {e.code()} {e.details()!r} {md}",
            )

        t0 = time.monotonic()
        try:
            ch.unary_unary("/demo.Echo/Slow")(b"", timeout=0.3)
            check(False, "DEADLINE_EXCEEDED expected")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, f"a 300 ms deadline on a 5 s call: {e.code()} after {time.monotonic() - t0:.2f} s")
        until("the backend to see the call cancelled", lambda: any(b.cancelled_after for b in bs), timeout=5)
        seen = [round(a, 2) for b in bs for a in b.cancelled_after]
        check(all(a < 1.0 for a in seen), f"the backend saw the call cancelled within 1 s: after {seen} s")

        bs[0].serving(False)
        time.sleep(2)
        got = spread(30)
        check("g1" not in got, f"a NOT_SERVING backend gets no call 2 s later: {got}")
        bs[0].serving(True)

        for b in bs:
            b.server.stop(0)
        t0 = time.monotonic()
        try:
            who(b"", timeout=5)
            check(False, "UNAVAILABLE expected")
        except grpc.RpcError as e:
            took = time.monotonic() - t0
            check(
                e.code() == grpc.StatusCode.UNAVAILABLE and "request id" in e.details() and took < 2.0,
                f"all backends down: {e.code()} {e.details()!r} in {took:.2f} s",
            )
    finally:
        p.terminate()
        p.wait()
    if failures:
        print(open(log).read()[-4000:])

    rb = Backend("r1")
    p, addr, log = weir(binary, [rb], "rate_limit:\n  enabled: true\n  capacity: 2\n  refill_per_second: 0.01\n")
    try:
        ch = grpc.insecure_channel(addr)
        who = ch.unary_unary("/demo.Echo/Who")
        until("the backend serving (one token)", lambda: try_call(who))
        codes = []
        for _ in range(3):
            try:
                who(b"", timeout=5)
                codes.append("OK")
            except grpc.RpcError as e:
                codes.append(e.code().name)
        check(codes[-1] == "RESOURCE_EXHAUSTED", f"a rate-limited call gets RESOURCE_EXHAUSTED: {codes}")
    finally:
        p.terminate()
        p.wait()
        rb.server.stop(0)
    tls_both_sides(binary)
    if failures:
        print(f"grpcio interop: {len(failures)} check(s) failed")
        sys.exit(1)
    print("grpcio interop: all checks passed")


class Pki:
    """A CA and the certificates it signs, made with the openssl command line (P-256 keys)."""

    def __init__(self, d, name):
        self.d, self.name = d, name
        self.ca = os.path.join(d, f"{name}-ca.pem")
        key = os.path.join(d, f"{name}-ca.key")
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
                "-subj", f"/CN={name} test CA", "-keyout", key, "-out", self.ca,
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
        self.ca_key = key

    def leaf(self, cn):
        """A server certificate for 127.0.0.1 and localhost, signed by this CA."""
        base = os.path.join(self.d, f"{self.name}-{cn}")
        leaf = types.SimpleNamespace(cert=base + ".pem", key=base + ".key")
        csr = base + ".csr"
        ext = base + ".ext"
        with open(ext, "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
                    "basicConstraints=critical,CA:FALSE\n")
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", f"/CN={cn}",
                "-keyout", leaf.key, "-out", csr)
        openssl("x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key, "-CAcreateserial",
                "-days", "2", "-extfile", ext, "-out", leaf.cert)
        return leaf


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def tls_both_sides(binary):
    """C-GRPC-5 with grpcio on both sides: TLS from the client to weir and from weir to backends."""
    d = tempfile.mkdtemp(prefix="weir-grpcio-pki-")
    ours, theirs = Pki(d, "ours"), Pki(d, "theirs")
    listener = ours.leaf("weir")
    bs = [Backend(f"t{i}", tls=ours.leaf(f"t{i}")) for i in (1, 2, 3)]
    rogue = Backend("rogue", tls=theirs.leaf("rogue"))
    server = (
        f"  tls:\n    certificates:\n      - cert_file: {listener.cert}\n        key_file: {listener.key}\n"
        f"  upstream:\n    tls_ca_file: {ours.ca}\n"
    )
    creds = grpc.ssl_channel_credentials(root_certificates=open(ours.ca, "rb").read())
    # `tcp` probes: the rogue backend accepts connections, so only its certificate can keep
    # calls from it.
    p, addr, log = weir(binary, bs + [rogue], server=server, mode="tcp", tls=True)
    try:
        ch = grpc.secure_channel(addr, creds, options=[("grpc.ssl_target_name_override", "localhost")])
        who = ch.unary_unary("/demo.Echo/Who")
        until("every TLS backend serving through weir's TLS listener", lambda: try_call(who))
        got = dict(collections.Counter(who(b"", timeout=5).decode() for _ in range(30)))
        check(
            sorted(got) == ["t1", "t2", "t3"] and sum(got.values()) == 30 and min(got.values()) >= 7,
            f"TLS both sides: 30 unary calls on one channel spread over the three h2 backends: {got}",
        )
        echoed = list(ch.stream_stream("/demo.Echo/Bidi")(iter([b"a", b"b", b"c"]), timeout=5))
        check(echoed == [b"A", b"B", b"C"], f"TLS both sides: bidi streaming: {echoed}")
        check(rogue.calls == 0, f"the backend whose certificate another CA signed got no call: {rogue.calls}")
    finally:
        p.terminate()
        p.wait()
    if failures:
        print(open(log).read()[-4000:])

    p, addr, log = weir(binary, [rogue], server=server, mode="tcp", tls=True)
    try:
        ch = grpc.secure_channel(addr, creds, options=[("grpc.ssl_target_name_override", "localhost")])
        t0 = time.monotonic()
        try:
            ch.unary_unary("/demo.Echo/Who")(b"", timeout=5)
            check(False, "UNAVAILABLE expected from the rogue backend alone")
        except grpc.RpcError as e:
            took = time.monotonic() - t0
            check(
                e.code() == grpc.StatusCode.UNAVAILABLE and "request id" in e.details() and took < 2.0,
                f"a backend whose certificate another CA signed: {e.code()} {e.details()!r} in {took:.2f} s",
            )
        check(rogue.calls == 0, f"the rogue backend alone got no call: {rogue.calls}")
        until("weir's upstream_tls_failed warning", lambda: "upstream_tls_failed" in open(log).read(), timeout=5)
        check(True, "weir logged upstream_tls_failed for the rogue backend")
    finally:
        p.terminate()
        p.wait()
        for b in bs + [rogue]:
            b.server.stop(0)
    if failures:
        print(open(log).read()[-4000:])


def try_call(who):
    try:
        who(b"", timeout=2)
        return True
    except grpc.RpcError:
        return False


if __name__ == "__main__":
    main(sys.argv[1])
