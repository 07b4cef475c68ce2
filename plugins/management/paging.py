"""RabbitMQ's list parameters: `page`, `page_size`, `name` (+ `use_regex`), `sort`,
`sort_reverse`.

Without `page` a list answers a plain JSON array (all items), as RabbitMQ does. With it, an
object `{items, page, page_count, page_size, filtered_count, item_count, total_count}`.
Filtering and sorting by name happen before items are drawn, so a page of 100 out of 10,000
queues serializes 100 queues; sorting by another field draws them all first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from herald.plugins.management.endpoints import Ctx
from herald.plugins.management.errors import bad_request

T = TypeVar("T")

PAGING_QUERY = ("page", "page_size", "name", "use_regex", "sort", "sort_reverse")
DEFAULT_PAGE_SIZE = 100


def _name_filter(ctx: Ctx) -> Callable[[str], bool] | None:
    pattern = ctx.query.get("name")
    if not pattern:
        return None
    if ctx.flag("use_regex"):
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise bad_request(f"invalid regular expression in 'name': {exc}") from None
        return lambda name: compiled.search(name) is not None
    lowered = pattern.lower()
    return lambda name: lowered in name.lower()


def _sort_value(value: Any) -> tuple[int, Any]:
    """Sort numbers before text before missing values, without comparing across kinds."""
    if isinstance(value, bool):
        return (0, int(value))
    if isinstance(value, int | float):
        return (0, value)
    if value is None:
        return (2, "")
    return (1, str(value))


def _lookup(item: dict[str, Any], path: str) -> Any:
    value: Any = item
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def listing(
    ctx: Ctx,
    objects: Sequence[T],
    name_of: Callable[[T], str],
    draw: Callable[[T], dict[str, Any]],
    *,
    key_of: Callable[[T], Any] | None = None,
) -> Any:
    """Filter, sort and page `objects`, drawing (serializing) only what is answered.

    `name_of` is what `name` filters on; `key_of` the default order (name by default).
    """
    total = len(objects)
    wanted = _name_filter(ctx)
    items = [o for o in objects if wanted(name_of(o))] if wanted is not None else list(objects)
    sort = ctx.query.get("sort", "")
    reverse = ctx.flag("sort_reverse")
    paged = "page" in ctx.query
    page = ctx.int_query("page", 1, low=1)
    size = ctx.int_query("page_size", DEFAULT_PAGE_SIZE, low=1, high=ctx.state.config.max_page_size)
    if sort in ("", "name"):
        items.sort(key=key_of or name_of, reverse=reverse)
        chosen = items[(page - 1) * size : page * size] if paged else items
        drawn = [draw(o) for o in chosen]
    else:
        all_drawn = [draw(o) for o in items]
        all_drawn.sort(key=lambda d: _sort_value(_lookup(d, sort)), reverse=reverse)
        drawn = all_drawn[(page - 1) * size : page * size] if paged else all_drawn
    if not paged:
        return drawn
    filtered = len(items)
    page_count = max(1, -(-filtered // size))
    if page > page_count:
        raise bad_request(f"page {page} out of range (page_count {page_count})")
    return {
        "items": drawn,
        "page": page,
        "page_count": page_count,
        "page_size": size,
        "filtered_count": filtered,
        "item_count": len(drawn),
        "total_count": total,
    }
