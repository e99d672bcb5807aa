"""Pipeline layouts: which decoder layers each model chunk (virtual stage) holds.

The default (``ParallelPlan.pp_layout == ""``) splits the layers as evenly as possible, earlier chunks taking
the remainder. A plan may instead give a layout in Megatron-Core's ``pipeline_model_parallel_layout``
syntax, as the Megatron-Bridge DeepSeek-V3 recipes do: chunks separated by ``|``; ``E`` the embedding, ``t``
one decoder layer, ``m`` one MTP module, ``L`` the loss (output head); ``x*N`` repeats one symbol and
``(...)*N`` a group. ``"Et*4|(t*4|)*14tmL"`` is 16 chunks: the embedding and 4 layers, 14 chunks of 4, and a
last chunk of 1 layer, the MTP module and the loss (Megatron-Bridge ``set_deepseek_v3_pipeline_model_parallel_layout``,
``(16, 1)`` and ``(4, 4)``, and the GB300 preset's ``pp_layout``).

moesim places the embedding in the first chunk and the head and MTP modules in the last one, so a layout
must put ``E`` at the start of its first chunk and ``m``/``L`` at the end of its last; it decides how many
decoder layers each chunk holds.

>>> decoders_per_chunk("Et*4|(t*4|)*14tmL")[:2], decoders_per_chunk("Et*4|(t*4|)*14tmL")[-1]
([4, 4], 1)
>>> len(decoders_per_chunk("Et*4|(t*4|)*14tmL")), mtp_modules("Et*4|(t*4|)*14tmL")
(16, 1)
"""

from __future__ import annotations

from functools import lru_cache

from sim.errors import ConfigError

__all__ = ["MAX_LAYOUT_CHARS", "decoders_per_chunk", "mtp_modules", "split_layers", "check_layout"]

#: Longest layout string accepted (a written layout is a few dozen characters).
MAX_LAYOUT_CHARS = 2000
#: Largest expansion of a layout (repetitions multiply): beyond any real model's layer count.
_MAX_SYMBOLS = 100_000


def _expand(text: str) -> str:
    """The layout with every ``*N`` repetition written out (raises ConfigError on bad syntax)."""
    if not isinstance(text, str) or len(text) > MAX_LAYOUT_CHARS:
        raise ConfigError(f"plan: pp_layout must be a layout string of at most {MAX_LAYOUT_CHARS} characters, "
                          f"got {str(text)[:60]!r}")

    def fail(why: str) -> ConfigError:
        return ConfigError(f"plan: pp_layout {text!r}: {why}")

    pos = 0

    def group() -> str:
        nonlocal pos
        out: list[str] = []
        while pos < len(text) and text[pos] != ")":
            ch = text[pos]
            if ch == "(":
                pos += 1
                inner = group()
                if pos >= len(text) or text[pos] != ")":
                    raise fail("unclosed '('")
                pos += 1
                item = inner
            elif ch in "Etm L|":
                pos += 1
                item = "" if ch == " " else ch
            else:
                raise fail(f"unknown symbol {ch!r} at {pos} (E embedding, t decoder layer, m MTP module, "
                           f"L loss, | chunk boundary, x*N, (...)*N)")
            if pos < len(text) and text[pos] == "*":
                pos += 1
                start = pos
                while pos < len(text) and text[pos].isdigit():
                    pos += 1
                if start == pos:
                    raise fail(f"'*' at {start - 1} needs a repeat count")
                count = int(text[start:pos])
                if len(item) * count > _MAX_SYMBOLS:
                    raise fail(f"expands past {_MAX_SYMBOLS} symbols")
                item *= count
            out.append(item)
            if sum(map(len, out)) > _MAX_SYMBOLS:
                raise fail(f"expands past {_MAX_SYMBOLS} symbols")
        return "".join(out)

    flat = group()
    if pos != len(text):
        raise fail(f"unmatched ')' at {pos}")
    return flat


@lru_cache(maxsize=256)
def _chunks(text: str) -> tuple[str, ...]:
    """The expanded chunks of a layout (memoised: plan searches read the same few layouts many times)."""
    chunks = _expand(text).split("|")
    if chunks and chunks[-1] == "" and len(chunks) > 1:  # a trailing '|' closes the last chunk
        chunks.pop()
    return tuple(chunks)


def decoders_per_chunk(text: str) -> list[int]:
    """Decoder layers (``t``) in each chunk of the layout."""
    return [c.count("t") for c in _chunks(text)]


def mtp_modules(text: str) -> int:
    """MTP modules (``m``) the layout places."""
    return sum(c.count("m") for c in _chunks(text))


def check_layout(text: str, *, n_chunks: int, n_layers: int, mtp_layers: int) -> None:
    """Refuse a layout that does not fit the plan and model: one ConfigError naming the field and the values."""
    chunks = _chunks(text)
    where = f"plan: pp_layout {text!r}"
    if len(chunks) != n_chunks:
        raise ConfigError(f"{where}: has {len(chunks)} chunks; the plan has {n_chunks} (pp x vpp)")
    if sum(c.count("t") for c in chunks) != n_layers:
        raise ConfigError(f"{where}: places {sum(c.count('t') for c in chunks)} decoder layers; the model has "
                          f"{n_layers}")
    if any(c.count("E") for c in chunks[1:]) or chunks[0].count("E") != 1 or not chunks[0].startswith("E"):
        raise ConfigError(f"{where}: the embedding (E) must open the first chunk, once")
    last = chunks[-1]
    if any(c.count("L") or c.count("m") for c in chunks[:-1]) or last.count("L") != 1 or not last.endswith("L"):
        raise ConfigError(f"{where}: the MTP modules (m) and the loss (L) must close the last chunk, the loss once")
    if last.rstrip("mL").count("m") or mtp_modules(text) != mtp_layers:
        raise ConfigError(f"{where}: places {last.count('m')} MTP modules (m) after the last chunk's layers; the "
                          f"plan trains {mtp_layers} (mtp_layers)")


def split_layers(n_layers: int, n_chunks: int, layout: str = "") -> list[list[int]]:
    """Layer indices of each chunk: per ``layout`` (its decoder counts), or as even as possible, earlier
    chunks taking the remainder."""
    if layout:
        sizes = decoders_per_chunk(layout)
    else:
        base, extra = divmod(n_layers, n_chunks)
        sizes = [base + (1 if c < extra else 0) for c in range(n_chunks)]
    out, start = [], 0
    for size in sizes:
        out.append(list(range(start, start + size)))
        start += size
    return out
