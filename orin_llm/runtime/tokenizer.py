"""An engine's tokenizer without transformers: `tokenizer.json` through the `tokenizers` library,
the chat template through jinja2 in the sandbox transformers renders it in.

Why: transformers and its tokenizer cost the daemon 28-31 MB resident (measured, docs/notes/benchmarks-lab-notes.md)
for two things it used from them. Its fast tokenizer is the `tokenizers` library, which we now call directly;
its chat templates are jinja2 in an ImmutableSandboxedEnvironment with a handful of helpers, which
we set up the same way (transformers 5.24, `utils/chat_template_utils.py`: trim_blocks, lstrip_blocks,
the loopcontrols extension, `tojson` without HTML escaping, `raise_exception`, `strftime_now`, and
messages with None-valued keys dropped). The build keeps transformers: it converts the weights and
writes this directory with `save_pretrained`. tests/runtime/test_tokenizer.py checks ids, decoded
text and rendered prompts against transformers' own tokenizer on the same directory.

What is not carried over, because no engine of ours needs it: the `{% generation %}` tag (assistant
masks), `continue_final_message`, and the WordPiece clean-up of decoded text (transformers 5 skips
it for BPE models, which Llama tokenizers are; a directory that asks for it on another model is
refused, never decoded differently).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Optional, Union

from ..errors import OrinError

# transformers' SPECIAL_TOKENS_ATTRIBUTES: the named tokens a chat template sees as variables
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
TEMPLATE_FILE, TEMPLATE_DIR = "chat_template.jinja", "additional_chat_templates"
LONG_TEXT = 16_384  # characters: from here on, encode() lets other threads run (a task or a chat is shorter)


class Tokenizer:
    """The surface the runtime uses: encode, decode, apply_chat_template (tokenize=False), the named
    special tokens and their ids, chat_template (a string, or a dict of named templates)."""

    def __init__(self, path: Path):
        from tokenizers import Tokenizer as Backend

        path = Path(path)
        self.file = path / "tokenizer.json"
        if not self.file.is_file():
            raise OrinError(f"{path}: no tokenizer.json (only fast tokenizers are supported); rebuild the engine")
        try:
            self.backend = Backend.from_file(str(self.file))
        except Exception as e:  # the library's own message says what it could not read
            raise OrinError(f"{self.file}: not a tokenizer the tokenizers library reads ({e})") from None
        config = _read_config(path)
        if config.get("clean_up_tokenization_spaces") and type(self.backend.model).__name__ != "BPE":
            raise OrinError(f"{path}: clean_up_tokenization_spaces on a non-BPE tokenizer is not supported")
        self.special_tokens_map = {name: _content(config[name]) for name in SPECIAL_TOKENS
                                   if config.get(name) is not None}
        self.chat_template = _chat_template(path, config)
        self._compiled: dict[str, Any] = {}

    @property
    def json(self) -> str:
        """tokenizer.json's text, read when asked (llguidance's LLTokenizer takes it once): not kept,
        3.5 MB for a 49k vocabulary."""
        return self.file.read_text(encoding="utf-8")

    def _id(self, name: str) -> Optional[int]:
        token = self.special_tokens_map.get(name)
        return None if token is None else self.backend.token_to_id(token)

    @property
    def eos_token_id(self) -> Optional[int]:
        return self._id("eos_token")

    @property
    def pad_token_id(self) -> Optional[int]:
        return self._id("pad_token")

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        if len(text) < LONG_TEXT:
            return self.backend.encode(text, add_special_tokens=add_special_tokens).ids
        # encode_batch lets go of the GIL while it works, encode does not: a large home sent to the
        # daemon would hold its event loop (its /health and every stream) on the worker's encode
        batch = getattr(self.backend, "encode_batch_fast", self.backend.encode_batch)  # _fast: 0.20+, no offsets
        return batch([text], add_special_tokens=add_special_tokens)[0].ids

    def decode(self, ids: Union[int, list[int]], skip_special_tokens: bool = False) -> str:
        return self.backend.decode([ids] if isinstance(ids, int) else list(ids),
                                   skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict], tools: Optional[list[dict]] = None,
                            tokenize: bool = False, add_generation_prompt: bool = False) -> str:
        """The prompt text, as transformers' apply_chat_template(..., tokenize=False) renders it."""
        if tokenize:
            raise OrinError("apply_chat_template renders text here; encode it with encode()")
        if not messages:
            raise OrinError("a chat needs at least one message")
        template = self._template(tools)
        chat = [{k: v for k, v in m.items() if v is not None} for m in messages]
        return template.render(messages=chat, tools=tools, documents=None,
                               add_generation_prompt=add_generation_prompt, **self.special_tokens_map)

    def _template(self, tools: Optional[list[dict]]):
        """The compiled template transformers would pick: the tool_use one of several when tools are
        given, else the default one."""
        source = self.chat_template
        if isinstance(source, dict):
            name = "tool_use" if tools is not None and "tool_use" in source else "default"
            if name not in source:
                raise OrinError(f"the tokenizer has chat templates {sorted(source)} and no default one")
            source = source[name]
        if source is None:
            raise OrinError("the tokenizer has no chat template")
        if source not in self._compiled:
            self._compiled[source] = _environment().from_string(source)
        return self._compiled[source]


def _read_config(path: Path) -> dict:
    config: dict = {}
    legacy = path / "special_tokens_map.json"  # older directories: merged under the config, as transformers does
    for f in (legacy, path / "tokenizer_config.json"):
        if f.is_file():
            try:
                data = json.loads(f.read_text(encoding="utf-8"))
            except ValueError as e:
                raise OrinError(f"{f}: not JSON ({e})") from None
            if not isinstance(data, dict):
                raise OrinError(f"{f}: must be a JSON object")
            config.update(data)
    return config


def _content(token: Any) -> str:
    """A special token as the config writes it: a string, or a serialized AddedToken."""
    return token["content"] if isinstance(token, dict) else str(token)


def _chat_template(path: Path, config: dict) -> Union[str, dict, None]:
    """chat_template.jinja and additional_chat_templates/*.jinja win over the config's entry (as in
    transformers' from_pretrained); a config may hold a string or a list of named templates."""
    templates = {}
    if (path / TEMPLATE_FILE).is_file():
        templates["default"] = (path / TEMPLATE_FILE).read_text(encoding="utf-8")
    if (path / TEMPLATE_DIR).is_dir():
        for f in sorted((path / TEMPLATE_DIR).glob("*.jinja")):
            templates[f.stem] = f.read_text(encoding="utf-8")
    if templates:
        return templates["default"] if list(templates) == ["default"] else templates
    entry = config.get("chat_template")
    if isinstance(entry, list):
        return {t["name"]: t["template"] for t in entry}
    return entry


_ENV = None


def _environment():
    """jinja2's sandbox, set up as transformers sets it up for chat templates (they are untrusted code)."""
    global _ENV
    if _ENV is None:
        import jinja2
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            # jinja's own tojson escapes HTML characters; transformers' does not
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=[jinja2.ext.loopcontrols])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        _ENV = env
    return _ENV
