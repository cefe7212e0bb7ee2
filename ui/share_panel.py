"""Sharing in the sidebar: the link in the address bar, JSON download/upload, code, the team library."""

from __future__ import annotations

from urllib.parse import quote, urlencode

import streamlit as st

from explorer.sharing import library
from explorer.errors import ExplorerError
from explorer.layout import MAX_FILE_BYTES, Layout, load_layout_bytes, parse_layout, seed_layout
from explorer.sharing.share import LeftOut, layout_to_params, layout_to_query, link_keeping_the_rest
from explorer.sharing.exports import maxtext_yaml, python_snippet
from explorer.text import markdown_literal
from ui import state

MESSAGES = "share_messages"  # section ("link", "upload", "library") -> (level, text), shown once where it belongs
ARRAY_PARAM = "array"  # the link's selected array: the page's, not the layout's, so not in explorer.sharing.share
LINK_ARRAY = "link_array"  # the array a link named, until the Layout page has checked the layout has it
LOADED_VERSION = "library_loaded"  # (name, version) of the library entry last loaded or saved
REFUSED_LINK = "refused_link"  # the query of a link that could not be opened, kept to copy and fix until dismissed
COPY_AS_CODE = "copy_as_code"  # the container of the "Copy as code" expander (its script, the rules as YAML)


def initial_layout() -> Layout:
    """The layout a new session starts from: the link's, or the seed with a message if the link is bad."""
    params = st.query_params.to_dict()
    selected = params.pop(ARRAY_PARAM, None)
    if not params:
        return seed_layout()
    try:
        layout, left_out = link_keeping_the_rest(params)
    except ExplorerError as error:  # no mesh, axes or model, or too long: nothing to keep
        _tell("link", "error", refuse_link(REFUSED_LINK, "the default layout", error))
        return seed_layout()
    if left_out:
        _tell("link", "error", partly_opened(REFUSED_LINK, left_out))
    if selected:
        st.session_state[state.SELECTED] = selected  # the Layout page falls back to its default if absent, and says so
        st.session_state[LINK_ARRAY] = selected
    return layout


def sync_address(layout: Layout) -> None:
    """Keep the address bar carrying the current layout, so copying it shares it.

    A layout too large for a link leaves the address bar empty rather than stale;
    the Share section says why.
    """
    try:
        layout_to_query(layout)
        params = layout_to_params(layout)
    except ExplorerError:
        params = {}
    selected = st.session_state.get(state.SELECTED)
    if selected and params:
        params[ARRAY_PARAM] = selected
    if st.query_params.to_dict() != params:
        st.query_params.from_dict(params)


def sync_selection(path: str) -> None:
    """Keep the address bar's ``array`` on the array the Layout page draws."""
    if st.query_params.get(ARRAY_PARAM) != path:
        st.query_params[ARRAY_PARAM] = path


def _tell(section: str, level: str, text: str) -> None:
    st.session_state.setdefault(MESSAGES, {})[section] = (level, text)


def show_message(section: str) -> None:
    """The message left for ``section`` by the last action (a callback runs before the script), drawn here, once."""
    message = st.session_state.get(MESSAGES, {}).pop(section, None)
    if message:
        getattr(st, message[0])(message[1])


def render(layout: Layout) -> None:
    """The sidebar's Share section for the current (valid) layout."""
    st.subheader("Share")
    show_refused_link(REFUSED_LINK)
    try:
        query = layout_to_query(layout)
    except ExplorerError as error:
        st.info(f"This layout is too large for a link ({markdown_literal(str(error))}); share it as a file or through the team library.")
    else:
        st.caption("The address bar always carries this layout: copy it to share.")
        with st.expander("Readable link"):
            st.caption("The same link as the address bar's, without `,:;` escaped:")
            selected = st.session_state.get(state.SELECTED)
            array = f"&{ARRAY_PARAM}={quote(selected, safe='/')}" if selected else ""
            st.container(key="share_link").code(_app_url() + query + array, language=None, wrap_lines=True)
    st.download_button(
        "Download layout (JSON)",
        layout.to_json() + "\n",
        file_name=f"{_file_stem(layout.name)}.json",
        mime="application/json",
        key="download_layout",
        width="stretch",
    )
    st.file_uploader(
        "Load a layout file",
        type=["json"],
        key="upload_layout",
        on_change=_load_upload,
        max_upload_size=1,
        help=f"A layout file (JSON, UTF-8) of at most {MAX_FILE_BYTES:,} bytes; it replaces the whole layout, target included.",
    )
    show_message("upload")
    # A keyed container, not a keyed expander: an expander with on_change="rerun" (drawn only while open) lost the
    # user's click once in a fresh clone's suite (tests/browser/test_share.py: opened, nothing drawn for 180 s)
    with st.container(key=COPY_AS_CODE), st.expander("Copy as code"):
        st.caption(
            "A complete script: mesh, rules and the Flax guide's recipe, printing every parameter's sharding. It runs "
            "as pasted in this project's folder (without a GPU or TPU, on the mesh's devices simulated on the CPU); "
            "swap the model block for your own module."
        )
        st.code(python_snippet(layout), language="python", wrap_lines=True)
        st.caption("The rules as MaxText-style logical_axis_rules:")
        st.code(maxtext_yaml(layout), language="yaml", wrap_lines=True)
    _library_section(layout)


def refuse_link(key: str, shown: str, error: ExplorerError) -> str:
    """Keep the address bar's query under ``key`` (the page is about to show ``shown`` and the address bar to
    follow it) and return the message that says so, for the page to show."""
    st.session_state[key] = "?" + urlencode(st.query_params.to_dict(), safe=":,;/*!'()@$")
    return (
        f"The link could not be opened, so {shown} is shown: {markdown_literal(str(error).rstrip('.'))}. "
        "The link you opened is kept under Share, to copy and fix."
    )


def partly_opened(key: str, left_out: tuple[LeftOut, ...]) -> str:
    """Keep the address bar's query under ``key`` (as ``refuse_link``) and say which fields of the link were left out,
    why, and what stands in for each: the rest of the layout is the link's."""
    st.session_state[key] = "?" + urlencode(st.query_params.to_dict(), safe=":,;/*!'()@$")
    fields = list(dict.fromkeys(out.param for out in left_out))
    said = "; ".join(f"{markdown_literal(str(out.error).rstrip('.'))} — {out.instead}" for out in left_out)
    return (
        f"The link opened without its {' and '.join(fields)}: {said}. The rest of the layout is the link's. "
        "The link you opened is kept under Share, to copy and fix."
    )


def show_refused_link(key: str, page_url: str | None = None) -> None:
    """The link that could not be opened, verbatim, until the user dismisses it: the address bar now carries what
    the page shows, so this is the only copy of what they were sent."""
    refused = st.session_state.get(key)
    if not refused:
        return
    st.caption("The link you opened, as it arrived: it could not be opened (the message says why); fix it and open it again.")
    st.container(key=key).code((_app_url() if page_url is None else page_url) + refused, language=None, wrap_lines=True)
    if st.button("Dismiss", key=f"dismiss_{key}"):
        st.session_state.pop(key, None)
        st.rerun()


def _app_url() -> str:
    """The app's address in the user's browser, ending in "/" (empty where unknown, as in AppTest)."""
    url = st.context.url or ""
    return url if not url or url.endswith("/") else url + "/"


def _file_stem(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name) or "layout"


def _load_upload() -> None:
    uploaded = st.session_state.get("upload_layout")
    if uploaded is None:
        return
    try:
        layout = load_layout_bytes(uploaded.getvalue(), "file")
    except ExplorerError as error:
        _tell("upload", "error", f"{markdown_literal(uploaded.name)} was not loaded: {markdown_literal(str(error))}")
        return
    state.load_layout(layout)
    _tell("upload", "success", f"Loaded {markdown_literal(uploaded.name)}.")


def _library_section(layout: Layout) -> None:
    st.markdown("**Team library**")
    try:
        folder, found = library.library_dir(), library.listing()
    except ExplorerError as error:
        st.error(markdown_literal(str(error)))
        return
    st.caption(f"Shared by everyone using this server ({markdown_literal(str(folder))}).")
    show_message("library")
    if found.skipped:
        st.warning(
            "Skipped in the library folder (left alone): "
            + "; ".join(f"{markdown_literal(name)}: {reason}" for name, reason in found.skipped[:5])
            + (f"; …and {len(found.skipped) - 5} more" if len(found.skipped) > 5 else "")
        )
    names = list(found.names)
    chosen = st.selectbox("Saved layouts", names, index=None, placeholder="choose a layout", key="library_choice")
    load_column, delete_column = st.columns(2)
    load_column.button("Load", key="library_load", disabled=chosen is None, on_click=_library_action, args=("load",), width="stretch")
    delete_column.button(
        "Delete", key="library_delete", disabled=chosen is None, on_click=_library_action, args=("delete",), width="stretch"
    )
    st.text_input("Name", key="library_name", persist_state=state.ACROSS_PAGES, placeholder="e.g. llama-7b fsdp 16x16")
    save_column, replace_column = st.columns(2)
    save_column.button("Save new", key="library_save", on_click=_library_action, args=("save",), width="stretch")
    loaded = st.session_state.get(LOADED_VERSION)
    replace_column.button(
        "Replace loaded",
        key="library_replace",
        disabled=loaded is None,
        on_click=_library_action,
        args=("replace",),
        help=f"Overwrite '{markdown_literal(loaded[0])}' (refused if someone saved it since you loaded it)"
        if loaded
        else "Load a layout first",
        width="stretch",
    )
    st.button(
        "Rename chosen to Name", key="library_rename", disabled=chosen is None, on_click=_library_action, args=("rename",), width="stretch"
    )


def _library_action(action: str) -> None:
    """Button callbacks run before the next script run, so loading can set the widgets' values."""
    chosen = st.session_state.get("library_choice")
    name = (st.session_state.get("library_name") or "").strip()
    current = st.session_state.get(state.LAST_VALID)
    try:
        if action == "load":
            entry = library.load(chosen)
            state.load_layout(entry.layout)
            st.session_state[LOADED_VERSION] = (entry.name, entry.version)
            text = f"Loaded '{markdown_literal(chosen)}' from the library."
        elif action == "delete":
            library.delete(chosen)
            st.session_state["library_choice"] = None
            text = f"Deleted '{markdown_literal(chosen)}'."
        elif action == "save":
            library.check_name(name)  # the library's own limits first (64), not a layout name's (120)
            entry = library.save(name, _named(current, name))
            state.load_layout(entry.layout, keep_selection=True)  # the layout on the page is the one saved, by its name
            st.session_state[LOADED_VERSION] = (entry.name, entry.version)
            text = f"Saved '{markdown_literal(name)}'."
        elif action == "replace":
            loaded_name, version = st.session_state[LOADED_VERSION]
            entry = library.save(loaded_name, _named(current, loaded_name), replaces=version)
            state.load_layout(entry.layout, keep_selection=True)
            st.session_state[LOADED_VERSION] = (entry.name, entry.version)
            text = f"Replaced '{markdown_literal(loaded_name)}'."
        else:
            library.rename(chosen, name)
            st.session_state["library_choice"] = name
            text = f"Renamed '{markdown_literal(chosen)}' to '{markdown_literal(name)}'."
        _tell("library", "success", text)
    except ExplorerError as error:
        _tell("library", "error", markdown_literal(str(error)))


def _named(layout_dict: dict, name: str) -> Layout:
    return parse_layout({**layout_dict, "name": name})
