"""lab.core.display: the one way tables read, in notebooks and in report.html."""
import re

import pandas as pd

from lab.core import display


def test_labels_are_words_with_units():
    assert display.label("decode_ceiling_tok_s") == "Decode ceiling (tok/s)"
    assert display.label("ttft_p50_ms_single") == "TTFT p50 single (ms)"
    assert display.label("kv_bytes_per_token") == "KV per token"
    assert display.label("gpu_tdp_w") == "GPU TDP (W)"
    assert display.label("Already a label") == "Already a label"


def test_values_have_three_significant_figures_and_bytes_read_as_gib():
    assert display.fmt(141.234) == "141"
    assert display.fmt(0.714285) == "0.714"
    assert display.fmt(4227.3) == "4,230"
    assert display.fmt(262144, "kv_bytes_per_token") == "256 KiB"
    assert display.fmt(18.4e9, "weights_bytes") == "17.1 GiB"
    assert display.fmt(None) == "—" and display.fmt(True) == "yes"
    assert display.fmt({"pass": 4, "fail": 1}) == "Pass: 4; Fail: 1"


def test_no_truncation_no_index_and_a_scrolling_box():
    long = "fix: " + "x" * 400
    page = display.frame_html(pd.DataFrame([{"fix": long, "tok_s": 12.3456}], index=[7]))
    text = re.sub(r"<i> \(more\)</i>|<[^>]+>", "", page)  # long tokens may wrap (<wbr>), long cells open in place
    assert long in text and "…" not in page
    assert "overflow-x:auto" in page and ">7<" not in page
    assert ">12.3<" in page


def test_an_empty_table_is_one_line():
    assert display.rows_html([]) == '<p class="lab-empty" style="color:#777">not on this profile</p>'
    assert repr(display.show(pd.DataFrame())) == display.EMPTY


def test_key_value_tables_read_as_words_with_units():
    page = display.rows_html([{"field": "device_bytes", "value": 4294967296}, {"field": "max_context_q8_0", "value": 5}])
    assert "4.00 GiB" in page and "4,294,967,296" not in page
    assert "Device<" in page and "Max context q8_0" in page
    assert display.label("GiB_at_32K") == "GiB at 32K"


def test_cells_wrap_at_separators_render_code_and_keep_commands_apart():
    # a narrow column wraps a path after "/" or "_", never inside a plain word
    assert display.breakable("records/01_hardware_checks.json") == "records<wbr>/<wbr>01<wbr>_<wbr>hardware<wbr>_<wbr>checks<wbr>.<wbr>json"
    assert display.breakable("Observed value") == "Observed value"
    # the data's Markdown code spans read as code, escaped
    assert display._cell("fix", "run `make setup` <now>") == "run <code>make setup</code> &lt;now&gt;"
    # two commands are two copyable blocks, never one joined line
    cell = display._cell("commands", "cmake --build build -j\nllama-server -m MODEL.gguf")
    text = re.sub(r"<(?!/?pre)[^>]+>", "", cell)  # the blocks' text, without the spans that keep a token whole
    assert cell.count("<pre") == 2 and ">cmake --build build -j</pre>" in text and ">llama-server -m MODEL.gguf</pre>" in text


def test_code_wraps_only_at_spaces():
    """At 800 px `-DCMAKE_CUDA_COMPILER=...` wrapped after its "-" (a browser may break after any hyphen): each token
    that holds a hyphen is kept whole (white-space:nowrap); a token longer than a line (a URL) may wrap after "/"
    only; a plain token needs no span; copying gives the text unchanged."""
    nowrap = '<span style="white-space:nowrap">'
    assert display.code_html("cmake -B build -DGGML_CUDA=ON") == (f"cmake {nowrap}-B</span> build "
                                                                   f"{nowrap}-DGGML_CUDA=ON</span>")
    url = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/cuda-keyring_1.1-1_all.deb"
    pieces = display.code_html(url).split("<wbr>")
    assert [re.sub(r"<[^>]+>", "", p) for p in pieces][-2:] == ["x86_64/", "cuda-keyring_1.1-1_all.deb"]
    assert all(p.startswith(nowrap) for p in pieces) and re.sub(r"<[^>]+>", "", "".join(pieces)) == url
    assert display._cell("fix", "run `make setup` <now>") == "run <code>make setup</code> &lt;now&gt;"
    assert display._cell("fix", "build with `-DGGML_CUDA=ON`") == f"build with <code>{nowrap}-DGGML_CUDA=ON</span></code>"
    # a long cell shows its start and opens in place for the rest: all of it is on the page
    long = "word " * 120
    cell = display._cell("evidence", long)
    assert cell.startswith("<details style=\"min-width:12rem\">") and cell.replace("<wbr>", "").count("word") == 120
