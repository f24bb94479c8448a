"""`python -m lab share RUN_DIR` and `lab predict --rows-dataset` (issue 42, giving back): a committed run folder as one
public row, and that row read back and refitted on."""
import json

import pytest

from lab.core.paths import ROOT
from lab.predict import predict_cli, public_speed, roofline, user_rows
from lab.records import share

RUN = ROOT / "outputs" / "h200-x1" / "20261201T225010Z_ca156936"  # the committed H200 run with notebook 06's records


def test_the_committed_h200_run_becomes_one_public_row():
    row = share.share_row(RUN)
    assert (row["gpu"], row["gpu_id"], row["gpu_count"], row["engine"], row["backend"]) == (
        "NVIDIA H200", "h200", 1, "llama.cpp", "cuda")
    assert row["driver"] == "580.159.04 (CUDA 13.0)" and row["build"].startswith("llama-cpp-python 0.3.36")
    # llama-bench tg256 at depth 512, three repetitions: its mean, sd and samples (records/06_benchmark.json)
    assert (row["decode_tok_s"], row["decode_tok_s_sd"], row["samples"]) == (90.749, 0.307, [90.83, 91.007, 90.409])
    assert row["depth_tokens"] == 512 + 256 // 2 and row["kv_type"] == "f16" and row["speculative"] is None
    assert row["file_gb"] == 15.385 and "synthetic" in row["quant"] and "synthetic" in row["notes"]
    assert row["source"] == "lab-run:20261201T225010Z_ca156936" and len(row["run_sha256"]) == 64
    assert row["run_sha256"] == share.run_sha256(RUN)  # the same folder, the same digest
    assert "-m" in row["flags"] and "qwen3.8-27b-64L-mtp1-Q4_K-seed0.gguf" in row["flags"]
    # the schema accepts it as an owner's row, not as a published one
    assert public_speed.validate_rows([row], unpublished_ok=True)[0].decode_tok_s == 90.749
    with pytest.raises(public_speed.PublicSpeedError, match="unpublished run"):
        public_speed.validate_rows([row])


def test_share_prints_tsv_and_json_without_host_paths_or_secrets(capsys):
    assert share.main([str(RUN)]) == 0
    out = capsys.readouterr().out
    tsv, _, js = out.partition("\n\n")
    header, values = tsv.splitlines()
    assert header.split("\t")[:4] == ["id", "model", "gpu", "gpu_id"] and len(values.split("\t")) == len(header.split("\t"))
    assert json.loads(js)["decode_tok_s"] == 90.749
    assert "/root" not in out and "vm" not in json.loads(js).values() and "hostname" not in out
    assert share.main([str(RUN), "--mtp", "2", "--json"]) == 0
    mtp = json.loads(capsys.readouterr().out)
    assert mtp["speculative"] == {"type": "draft-mtp", "n_max": 2, "acceptance": "0.00"}
    assert mtp["decode_tok_s"] == 53.016 and "--host" not in mtp["flags"] and "--port" not in mtp["flags"]
    assert share.clean_flags(["llama-server", "-m", "/home/me/m.gguf", "--host", "0.0.0.0", "--api-key=s3cret",
                              "--port", "8080", "-c", "4096"]) == ["-m", "m.gguf", "-c", "4096"]


def test_a_folder_without_a_measurement_says_why(tmp_path, capsys):
    assert share.main([str(tmp_path)]) == 1
    assert "no readable manifest.json" in capsys.readouterr().err
    old = ROOT / "outputs" / "h200-x1" / "20261201T133417Z_056e18c5"  # notebook 03 only: no decode measurement
    assert share.main([str(old)]) == 1
    assert "no decode measurement" in capsys.readouterr().err
    assert share.main([str(RUN), "--mtp", "9"]) == 1
    assert "no draft-mtp arm at n-max 9" in capsys.readouterr().err


def test_rows_dataset_reads_the_shared_row_and_refits(tmp_path, capsys):
    assert share.main([str(RUN), "--json"]) == 0
    (tmp_path / "mine.json").write_text(capsys.readouterr().out)
    assert share.main([str(RUN), "--tsv"]) == 0
    (tmp_path / "tsv").mkdir()
    (tmp_path / "tsv" / "mine.tsv").write_text(capsys.readouterr().out)
    before = roofline.per_token_model()
    plain = predict_cli.main(["--gpu", "H200", "--json"])
    base = json.loads(capsys.readouterr().out)[0]["predicted_tok_s"]
    assert plain == 0
    for given in (tmp_path / "mine.json", tmp_path / "tsv"):
        rc = predict_cli.main(["--gpu", "H200", "--json", "--rows-dataset", str(given)])
        out, err = capsys.readouterr()
        assert rc == 0 and "1 row(s) read, 1 in the refit (h200-x1-20261201t225010z-ca156936)" in err
        # the owner's H200 row joins Hopper's own fit (the lab's H100 + H200 pair): its fixed cost moves, the
        # fraction stays at the physical cap
        assert "hopper: fraction of datasheet bandwidth 0.999 -> 0.999; fixed 7.49 -> 7.66 ms/token" in err
        refit = json.loads(out)[0]
        # the owner's H200 measured 90.7 tok/s at depth 640: the refit's answer moves from the lab's toward it
        assert abs(refit["predicted_tok_s"] - 90.749) < abs(base - 90.749)
        assert "h200-x1-20261201t225010z-ca156936" in refit["model"]["fraction_from"]
    # leaving the refit restores the lab's own fit
    assert roofline.per_token_model().fraction_by_arch == before.fraction_by_arch
    assert all(r.source.startswith("https://") for r in public_speed.load())


def test_a_bad_rows_dataset_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rows:\n- id: x\n  gpu: RTX 4090\n")
    assert predict_cli.main(["--gpu", "4090", "--rows-dataset", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "bad.yaml: row 'x': field 'model'" in err and "Traceback" not in err
    assert predict_cli.main(["--gpu", "4090", "--rows-dataset", str(tmp_path / "none.yaml")]) == 1
    assert "no such file or folder" in capsys.readouterr().err
    clash = tmp_path / "clash.json"
    row = dict(share.share_row(RUN), id="v100-32g-b10358-plain")
    clash.write_text(json.dumps(row))
    assert predict_cli.main(["--gpu", "4090", "--rows-dataset", str(clash)]) == 1
    assert "reuse the id(s) v100-32g-b10358-plain" in capsys.readouterr().err
    with pytest.raises(user_rows.RowsDatasetError, match="a folder with no"):
        user_rows.read(tmp_path / "empty") if (tmp_path / "empty").mkdir() is None else None
