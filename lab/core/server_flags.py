"""Server flags a profile's `server_args` may not hold, and how to recognise one in any spelling an engine accepts.

They bind, expose or carry a secret: in server_args they would override what the lab binds, checks and records
(`--host 0.0.0.0` after the lab's own `--host 127.0.0.1`: the last one wins) or put a key into argv, the records
and the report. Refused in the profile (lab.core.profiles.Profile's server_args validator) and in the final argv
before a server starts (lab.serving.serve.check_argv), where a caller's extra flags are seen too."""
from __future__ import annotations

# Each flag, in every engine's spelling (llama.cpp common/arg.cpp of the pinned release; vLLM's launchers/cli_args.py;
# llama_cpp.server's settings) → what to use instead, said in the refusal.
_USE_HOST = "set `host:` in the profile (the lab binds there, refuses a non-loopback host without a key, and records it)"
_USE_PORT = "set `port:` in the profile"
_USE_KEY = ("set `api_key_env:` in the profile to the NAME of an environment variable holding the key (the lab hands "
            "it to the server in its environment, never in argv, and redacts it everywhere)")
_NO_TLS = "the lab serves plain HTTP on the host it records; put TLS in a proxy in front of it"
_NO_CORS = "the lab limits CORS to local origins so no web page can use the server; leave it to the lab"
GUARDED_FLAGS = {
    "--host": _USE_HOST, "--uds": _USE_HOST, "--reuse-port": _USE_PORT, "--port": _USE_PORT, "--grpc-port": _USE_PORT,
    "--api-key": _USE_KEY, "--api-key-file": _USE_KEY, "--hf-token": "export HF_TOKEN instead", "-hft": "export HF_TOKEN instead",
    "--ssl-key-file": _NO_TLS, "--ssl-cert-file": _NO_TLS, "--ssl-keyfile": _NO_TLS, "--ssl-certfile": _NO_TLS,
    "--ssl-ca-certs": _NO_TLS, "--ssl-cert-reqs": _NO_TLS, "--ssl-ciphers": _NO_TLS, "--enable-ssl-refresh": _NO_TLS,
    "--cors-origins": _NO_CORS, "--cors-credentials": _NO_CORS, "--allowed-origins": _NO_CORS,
    "--allow-credentials": _NO_CORS, "--path": "the lab serves no static files",
    "--config": "vLLM reads more flags from that file, unseen by these checks: put them in server_args",
}


def guarded_flag(word: str) -> str | None:
    """The GUARDED_FLAGS entry an argv word sets, in any spelling an engine accepts: `--api_key` (both engines read
    `_` as `-`), `--host=0.0.0.0` (vLLM's argparse) and a prefix of a flag (argparse takes `--hos` for `--host`);
    None for any other word."""
    name = word.split("=", 1)[0] if word.startswith("--") else word
    name = "--" + name[2:].replace("_", "-") if name.startswith("--") else name
    if name in GUARDED_FLAGS:
        return name
    if name.startswith("--") and len(name) > 3:  # an abbreviation argparse would expand to a guarded flag
        return next((flag for flag in GUARDED_FLAGS if flag.startswith(name)), None)
    return None
