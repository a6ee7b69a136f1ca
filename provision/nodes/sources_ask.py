"""Runs ON THE NODES: asks for each index file a run will fetch, with the Python the node has for Ansible anyway.

Minimal nodes (debootstrap's minbase, several minimal cloud images) have neither curl nor wget, and every node
Ansible manages has a Python: so the sources check (sources_check.py) sends this file's text to the node and runs
it there with the node's interpreter. It must run on the oldest one a node may offer: Python 3.6 (EL8's
platform-python, which dnf runs on while prepare installs the interpreter Ansible is given), with the standard
library only; tests/test_sources_check.py holds its syntax to 3.6.

    python3 -c "$(this file)" TIMEOUT_S URL...

prints one line per URL, `<index> <HTTP status, 000 without one> <cause>`, the cause one word of CAUSES ("-"
where an HTTP answer came). An apt repository's InRelease missing is asked again as Release (apt reads that,
with Release.gpg, where a repository has no InRelease). file:// URLs are looked for on the node's own disk.
Nothing is written on the node; no body is read beyond the answer's headers.
"""
import os
import socket
import ssl
import sys
import threading
from http.client import HTTPException
from urllib.error import HTTPError, URLError
from urllib.parse import unquote, urlsplit
from urllib.request import urlopen

# What stopped a request, as a word the controller turns into a sentence (sources_check.py: ASK_CAUSES).
CAUSES = ("-", "file", "resolve", "refused", "connect", "timeout", "certificate", "tls", "reset", "empty", "error")
# Requests in flight at once on the node.
PARALLEL = 8


def cause_of(error):
    """The word for an exception a request raised (URLError wraps the socket's own)."""
    reason = error.reason if isinstance(error, URLError) and not isinstance(error, HTTPError) else error
    if isinstance(reason, socket.gaierror):
        return "resolve"
    # Before Python 3.10 socket.timeout is not TimeoutError.
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return "timeout"
    if isinstance(reason, ssl.SSLError):
        # 3.6 has no SSLCertVerificationError: its reason names the failed verification.
        return "certificate" if "CERTIFICATE_VERIFY_FAILED" in str(reason) else "tls"
    if isinstance(reason, ssl.CertificateError):
        return "certificate"
    if isinstance(reason, ConnectionRefusedError):
        return "refused"
    if isinstance(reason, ConnectionResetError):
        return "reset"
    if isinstance(reason, HTTPException):
        return "empty"
    if isinstance(reason, OSError):
        return "connect"
    return "error"


def ask(url, timeout_s):
    """(HTTP status or 0, cause) for one URL."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        return (200 if os.access(unquote(parts.path), os.R_OK) else 404), "file"
    try:
        answer = urlopen(url, timeout=timeout_s)
    except HTTPError as error:
        return error.code, "-"
    except Exception as error:  # noqa: BLE001 (any failure is an answer: the node could not fetch it)
        return 0, cause_of(error)
    status = answer.status if hasattr(answer, "status") else answer.getcode()
    answer.close()
    return status, "-"


def ask_index(url, timeout_s):
    status, cause = ask(url, timeout_s)
    if url.endswith("/InRelease") and not 200 <= status < 300:
        return ask(url[:-len("InRelease")] + "Release", timeout_s)
    return status, cause


def main(argv):
    timeout_s = float(argv[0])
    urls = argv[1:]
    answers = {}
    lock = threading.Lock()
    queue = list(enumerate(urls))

    def work():
        while True:
            with lock:
                if not queue:
                    return
                number, url = queue.pop(0)
            found = ask_index(url, timeout_s)
            with lock:
                answers[number] = found

    workers = [threading.Thread(target=work) for _ in range(min(PARALLEL, len(urls)))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for number in range(len(urls)):
        status, cause = answers.get(number, (0, "error"))
        sys.stdout.write(f"{number} {status:03d} {cause}\n")


if __name__ == "__main__":
    main(sys.argv[1:])
