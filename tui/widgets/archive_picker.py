"""ArchivePicker: the Compare screen's list of evidence archives, drawn so that selected and
not selected differ in their text, not only in colour: ``[x]`` and ``[ ]``. Textual's own
button draws ``X`` in both states, told apart by colour alone, which a monochrome terminal, a
tmux capture or a colour-blind reader loses (tui.widgets.tick does the same for check boxes)."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widgets import OptionList, SelectionList
from textual.widgets.option_list import OptionDoesNotExist

SELECTED, UNSELECTED = "[x]", "[ ]"  # as wide as Textual's three-cell button they replace


class ArchivePicker(SelectionList):
    """A SelectionList of archive paths (values), drawn with ``[x]`` / ``[ ]``; a long name
    wraps onto the next lines (app.tcss: text-wrap), never cut: its end tells archives apart."""

    def render_line(self, y: int) -> Strip:
        # the prompt's line as OptionList draws it (wrapped to the width left of the gutter);
        # SelectionList's own button assumes one line per option, so it is drawn here
        line = OptionList.render_line(self, y)
        try:
            index, offset = self._lines[self.scroll_offset.y + y]
            selection = self.get_option_at_index(index)
        except (IndexError, OptionDoesNotExist):
            return line
        segments = list(line)
        base = (segments[0].style if segments else None) or Style()
        mark = (SELECTED if selection.value in self._selected else UNSELECTED) if offset == 0 else " " * 3
        # the option index in the meta: a mouse click on the mark toggles that option
        return Strip([Segment(mark, base + Style(meta={"option": index})), Segment(" ", base), *segments])
