"""WholeCellScrollBarRender: scrollbar thumbs drawn in whole cells of colour, without the
eighth-block glyphs (▁▂▃ ... ▇) Textual uses for sub-cell positions.

Those glyphs read as stray one-cell marks at the right edge in tmux with few colours, over
SSH and in text captures (`tmux capture-pane`), where the track's colour does not show.
Installed once by the app through ``ScrollBar.renderer`` (Textual's documented hook).
"""

from __future__ import annotations

from textual.scrollbar import ScrollBar, ScrollBarRender


class WholeCellScrollBarRender(ScrollBarRender):
    """The thumb's ends are rounded to whole cells: blank glyphs on the thumb's colour."""

    VERTICAL_BARS = [" "] * 8
    HORIZONTAL_BARS = [" "] * 8


def install() -> None:
    ScrollBar.renderer = WholeCellScrollBarRender
