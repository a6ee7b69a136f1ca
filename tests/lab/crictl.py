#!/usr/bin/python3
"""A stand-in for crictl on lab nodes: Debian ships no cri-tools, and none can be downloaded here.

It speaks the real CRI API (runtime.v1.RuntimeService over containerd's socket, with python3-grpcio from
Debian) for the two commands the lab needs: `crictl version` and `crictl info`, printed as crictl prints them
(info: the runtime's conditions and its configuration, as JSON). The messages are encoded and decoded by hand:
they are small, and the CRI's .proto files are not on the nodes."""
from __future__ import annotations

import json
import sys

import grpc

SERVICE = "/runtime.v1.RuntimeService/"
CONFIG = "/etc/crictl.yaml"


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7


def fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """A protobuf message's fields in order: (number, varint value or length-delimited bytes)."""
    found: list[tuple[int, int | bytes]] = []
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            found.append((number, value))
        elif wire == 2:
            size, at = _varint(data, at)
            found.append((number, data[at:at + size]))
            at += size
        else:
            raise ValueError(f"unexpected wire type {wire}")
    return found


def _text(value: int | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def endpoint() -> str:
    try:
        with open(CONFIG, encoding="utf-8") as config:
            for line in config:
                key, _, value = line.partition(":")
                if key.strip() == "runtime-endpoint":
                    return value.strip().strip("'\"")
    except OSError:
        pass
    return "unix:///run/containerd/containerd.sock"


def call(method: str, request: bytes) -> bytes:
    with grpc.insecure_channel(endpoint()) as channel:
        rpc = channel.unary_unary(SERVICE + method, request_serializer=lambda b: b, response_deserializer=lambda b: b)
        return rpc(request, timeout=10)


def version() -> str:
    # VersionRequest{version = "v1"}; VersionResponse{version, runtime_name, runtime_version, runtime_api_version}.
    names = {1: "Version", 2: "RuntimeName", 3: "RuntimeVersion", 4: "RuntimeApiVersion"}
    reply = dict(fields(call("Version", b"\x0a\x02v1")))
    return "".join(f"{names[n]}:  {_text(reply.get(n, b''))}\n" for n in sorted(names))


def info() -> str:
    # StatusRequest{verbose = true}; StatusResponse{status: RuntimeStatus{conditions}, info: map<string, string>}.
    document: dict[str, object] = {}
    conditions = []
    for number, value in fields(call("Status", b"\x08\x01")):
        if number == 1 and isinstance(value, bytes):
            for _, condition in fields(value):
                parts = dict(fields(condition if isinstance(condition, bytes) else b""))
                conditions.append({"type": _text(parts.get(1, b"")), "status": bool(parts.get(2, 0)),
                                   "reason": _text(parts.get(3, b"")), "message": _text(parts.get(4, b""))})
        elif number == 2 and isinstance(value, bytes):
            entry = dict(fields(value))
            text = _text(entry.get(2, b""))
            try:
                document[_text(entry.get(1, b""))] = json.loads(text)
            except ValueError:
                document[_text(entry.get(1, b""))] = text
    return json.dumps({"status": {"conditions": conditions}, **document}, indent=2) + "\n"


def main(argv: list[str]) -> int:
    commands = {"version": version, "info": info}
    if len(argv) != 2 or argv[1] not in commands:
        print("usage: crictl version|info (the lab's stand-in: tests/lab/crictl.py)", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(commands[argv[1]]())
    except grpc.RpcError as exc:
        print(f"crictl: {exc.code().name}: {exc.details()}", file=sys.stderr)  # type: ignore[attr-defined]
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
