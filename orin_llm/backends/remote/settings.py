"""Where the remote engine is and how much it is trusted: checked once, at the edge.

Safe by default: nothing is sent anywhere unless a URL is configured; a URL that leaves this host must
be https and come with a bearer token (a plain-http or unauthenticated planner on a building's network
is anyone's planner); only that URL is ever called (no redirects are followed).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlsplit

from ...errors import OrinError
from .flavors import FLAVORS, PROMPTS, sends_text

LOOPBACK_NAMES = ("localhost", "localhost.localdomain")
PLANS = ("stepwise", "whole")



def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class RemoteSettings:
    url: str  # the engine's base URL: https://site:8000 (…/v1/completions is added)
    token: Optional[str] = None  # bearer token (required beyond loopback)
    model: Optional[str] = None  # the served model's name; None: the engine's first /v1/models entry
    first_token_share: float = 0.5  # the local engine starts when the remote has no first token by this share
    # of the request's deadline (or of timeout_s), or has been silent that long since its last chunk
    timeout_s: float = 10.0  # a request's budget when it has no deadline; the remote is abandoned after it
    backoff_s: float = 1.0  # after a failure the remote rests this long, doubling per failure in a row …
    backoff_max_s: float = 60.0  # … up to this
    # a plan under the home's state (feasibility enforce): "stepwise", one remote request per step with the
    # grammar of the steps feasible now; "whole", one request with the home's grammar, checked here
    # (stepwise.py; the measurements behind the default: jetson/GUIDE.md, "Site server")
    plans: str = "stepwise"
    flavor: str = "vllm"  # the engine's request fields (flavors.py): vllm, sglang or trtllm
    prompt: str = "auto"  # the prompt as token ids or as text (flavors.py): ids, text, or auto (text for sglang)

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise OrinError(f"--remote {self.url!r}: give an http(s) URL with a host, e.g. https://site-server:8000")
        if parts.query or parts.fragment or parts.username:
            raise OrinError(f"--remote {self.url!r}: give the base URL only (no query, fragment or credentials; "
                            "the token goes in --remote-token-file)")
        if not is_loopback(parts.hostname):
            if parts.scheme != "https":
                raise OrinError(f"--remote {self.url!r}: a remote engine beyond this host must be https "
                                "(plain http is allowed on loopback only)")
            if not self.token:
                raise OrinError(f"--remote {self.url!r}: a remote engine beyond this host needs a bearer token: "
                                "--remote-token-file FILE (or $ORIN_LLM_REMOTE_TOKEN)")
        if self.flavor not in FLAVORS:
            raise OrinError(f"--remote-flavor {self.flavor!r}: one of {', '.join(FLAVORS)}")
        if self.prompt not in PROMPTS:
            raise OrinError(f"--remote-prompt {self.prompt!r}: one of {', '.join(PROMPTS)}")
        if self.flavor == "edgellm" and self.prompt == "ids":
            raise OrinError("--remote-prompt ids: the Edge-LLM server takes chat messages, so the prompt goes as "
                            "text (--remote-prompt text or auto)")
        if self.plans not in PLANS:
            raise OrinError(f"--remote-plans {self.plans!r}: one of {', '.join(PLANS)}")
        if not 0 < self.first_token_share <= 1:
            raise OrinError(f"--remote-first-token-share must be in (0, 1], got {self.first_token_share:g}")

    @property
    def text_prompt(self) -> bool:
        return sends_text(self.flavor, self.prompt)

    @property
    def host(self) -> str:
        parts = urlsplit(self.url)
        return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
