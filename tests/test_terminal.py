"""``printable`` (free text: an answer, a harness's or an upstream's line) keeps what
written language needs and spells what hides; ``unambiguous`` (what is judged) keeps
nothing invisible."""

from __future__ import annotations

import pytest

from sharedos.terminal import printable, printable_text, unambiguous


@pytest.mark.parametrize(
    "text",
    [
        "山田太郎 ファイルを読みました",  # CJK: wide, shown as itself
        "الملف محفوظ: علي",  # Arabic, drawn right to left by the terminal
        "שלום, הקובץ נשמר",  # Hebrew
        "می\u200cخواهم فایل را بخوانم",  # Persian: a ZWNJ inside a word, on every other word
        "क्\u200dष",  # Devanagari: a ZWJ after a virama
        "\U0001f468\u200d\U0001f469\u200d\U0001f467 family",  # an emoji ZWJ sequence
        "\u26a0\ufe0f 2 calls denied \u2764\ufe0f",  # emoji presentation selectors
        "#\ufe0f\u20e3 keycap",
        "e\u0301t\u00e9 \U0001f44d\U0001f3fd \U0001f1eb\U0001f1f7",  # combining mark, skin tone, flag
        "col1\tcol2",
    ],
)
def test_free_text_in_any_script_reads_as_written(text: str) -> None:
    # before: printable spelled every joiner and selector, so a model's answer in Persian
    # read "می\u200cخواهم" and its every warning sign "\u26a0\ufe0f"
    assert printable(text) == text
    assert printable_text(f"{text}\n{text}") == f"{text}\n{text}"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("files\u200d-server", "files\\u200d-server"),  # beside ASCII: shows nothing
        ("notes\ufe0f.txt", "notes\\ufe0f.txt"),  # a selector after a letter: nothing
        ("\u200d\U0001f469", "\\u200d\U0001f469"),  # at an end
        ("\U0001f468\u200d", "\U0001f468\\u200d"),
        ("\u0645\u200c\u200c\u062e", "\u0645\\u200c\\u200c\u062e"),  # doubled
        ("\u0645\u200c \u062e", "\u0645\\u200c \u062e"),  # beside a space
        ("\u0645\u200b\u062e", "\u0645\\u200b\u062e"),  # a zero-width space is no joiner
        ("\u0639\u202e\u0644\u200f", "\u0639\\u202e\u0644\\u200f"),  # bidi controls
        ("\u3164x\U000e0041", "\\u3164x\\U000e0041"),
    ],
)
def test_free_text_still_spells_what_shows_nothing(text: str, shown: str) -> None:
    assert printable(text) == shown


def test_what_is_judged_spells_every_joiner() -> None:
    # two principals, two paths: "a\u200cb" and "ab" must not read alike to an approver
    assert unambiguous("\u0645\u200c\u062e") == "\u0645\\u200c\u062e"
    assert unambiguous("\u26a0\ufe0f") == "\u26a0\\ufe0f"
    assert unambiguous("\U0001f468\u200d\U0001f469") == "\U0001f468\\u200d\U0001f469"
