"""Rewrite the generated parts of README.md from the registry (run after changing a method):

    python scripts/update_readme.py

tests/test_registry.py fails while README.md and the registry disagree.
"""

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def generated():
    from flashlesson.registry import attention_table, auto_rules_text, softmax_table
    return {"methods": "\n" + softmax_table() + "\n", "auto": auto_rules_text(),
            "attention": "\n" + attention_table() + "\n"}


def render(text, parts):
    for key, body in parts.items():
        pattern = re.compile(rf"(<!-- {key}:begin -->)(.*?)(<!-- {key}:end -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"README.md has no <!-- {key}:begin/end --> markers")
        text = pattern.sub(lambda m: m.group(1) + body + m.group(3), text)
    return text


def main():
    text = README.read_text()
    new = render(text, generated())
    if new != text:
        README.write_text(new)
        print("README.md updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
