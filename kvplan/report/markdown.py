"""Sections as Markdown (kvplan simulate --format md)."""

from __future__ import annotations

from .sections import Section


def markdown(sections: list[Section]) -> str:
    parts = []
    for section in sections:
        parts.append(f"### {section.title}\n")
        headers = section.headers or (["", ""] if section.rows and len(section.rows[0]) > 1 else [""])
        parts.append("| " + " | ".join(headers) + " |")
        parts.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers))) + "|")
        for row in section.rows:
            parts.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
        parts.append("")
    return "\n".join(parts)
