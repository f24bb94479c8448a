"""Notebook 02's page (install verification): the versions table, the checks chart, the 02_install record
(`record`) and its closing text (`what_this_means`), from what lab.measure.install found on this machine and
lab.predict.compat judged. The notebook's steps (`installed_versions(s)`, `toolchain_checks(s, versions)`,
`machine_facts(s, versions)`, `rule_checks(facts)`, `by_hand(s)`, and `start`, `answer`, `show` from
lab.pages.session) are here too: the notebook imports this page and nothing else from lab. Each step keeps what it
found in the session (`s.results`: versions, toolchain_checks, facts); `record(s)` builds the record from those and
the rules they give (`rule_checks`)."""
from __future__ import annotations

from lab.core.checks import Check
from lab.core.profiles import Profile
from lab.core.session import Session
from lab.measure import install as this_machine
from lab.pages import session
from lab.pages.session import answer, checks_table, keep, show, start  # noqa: F401  (what every notebook calls, through its page)
from lab.serving import byhand

NAME = "02_install"


# ---------------------------------------------------------------- the notebook's steps
def installed_versions(s: Session) -> dict:
    """What is installed on this machine: driver, CUDA, nvcc, torch, llama-cpp-python, the llama.cpp tools, vLLM,
    Jupyter, Python (lab.measure.install.installed_versions)."""
    return keep(s, "versions", this_machine.installed_versions(s.profile))


def toolchain_checks(s: Session, versions: dict) -> list[Check]:
    """Is the lab's own toolchain complete: the bindings import, the tools are built, both from one llama.cpp build
    (lab.measure.install.install_checks)."""
    return keep(s, "toolchain_checks", this_machine.install_checks(s.profile, versions))


def machine_facts(s: Session, versions: dict) -> dict:
    """The facts the compatibility rules read: seen on this machine, else declared by the profile
    (lab.measure.install.machine_facts)."""
    return keep(s, "facts", this_machine.machine_facts(s.profile, versions))


def rule_checks(facts: dict) -> list[Check]:
    """The compatibility rules (lab/data/compat_rules.yaml) evaluated on `facts`; unknown inputs skip a rule."""
    return this_machine.rule_checks(facts)



def by_hand(s: Session):
    """The installation half of the by-hand track for the profile's card (lab.serving.byhand), as Markdown for a
    notebook cell: driver, Secure Boot, CUDA toolkit, llama.cpp, each step with its sources."""
    from IPython.display import Markdown

    return Markdown(byhand.markdown(s.profile, part="install"))


def versions_rows(versions: dict) -> list[dict]:
    """A flat what/version/detail table for the notebook and the report."""
    lcp, nvcc, torch, vllm = versions["llama_cpp_python"], versions["nvcc"], versions["torch"], versions["vllm"]
    tool = versions["llama_cpp_tools"].get("llama-server", {})
    rows = [
        {"what": "NVIDIA driver", "version": versions["driver"], "detail": versions["gpu_note"] or ""},
        {"what": "CUDA (driver API)", "version": versions["cuda_driver_api"], "detail": "highest CUDA the driver runs"},
        {"what": "nvcc (CUDA toolkit)", "version": nvcc["version"], "detail": nvcc.get("reason") or nvcc.get("path")},
        {"what": "torch", "version": torch.get("version"),
         "detail": f"CUDA {torch.get('cuda')}, archs {torch.get('arch_list')}" if torch.get("version") else torch.get("reason")},
        {"what": "llama-cpp-python", "version": lcp.get("version"),
         "detail": f"GPU offload: {lcp.get('gpu_offload')}" if lcp.get("system_info") else lcp.get("reason")},
        {"what": "llama.cpp tools", "version": f"{tool.get('version')} (commit {tool.get('commit')})" if tool.get("present") else None,
         "detail": tool.get("built_with") or tool.get("reason")},
        {"what": "vLLM", "version": vllm.get("version"), "detail": vllm.get("reason") or vllm.get("python")},
    ]
    rows += [{"what": k, "version": v, "detail": ""} for k, v in versions["jupyter"].items()]
    rows.append({"what": "Python", "version": versions["python"], "detail": ""})
    return rows


def versions_frame(versions: dict):
    import pandas as pd

    return pd.DataFrame(versions_rows(versions))


def checks_chart(profile: Profile, tool_checks: list, rule_checks_: list):
    """Notebook 02's chart: the toolchain's checks and the compatibility rules' together, by status."""
    from lab.core.checks import chart

    return chart(tool_checks + rule_checks_, f"Install and compatibility checks · {profile.name}")


def build_record(profile: Profile, versions: dict, facts: dict, tool_checks: list, rule_checks_: list) -> dict:
    """The 02_install record: the verdict and versions in the summary, every check, the versions table and chart,
    the raw versions and facts (what this notebook can see of the server, `server_scope`, the session adds)."""
    from lab.core.checks import worst

    all_checks = tool_checks + rule_checks_
    failed = [c.name for c in all_checks if c.status == "fail"]
    from lab.core import planmode

    record = {
        "title": "02 · Install verification",
        "summary": {
            "verdict": worst(all_checks),
            "llama-cpp-python": versions["llama_cpp_python"].get("version"),
            "llama.cpp commit": versions["llama_cpp_tools"].get("llama-server", {}).get("commit"),
            "GPU offload available": versions["llama_cpp_python"].get("gpu_offload"),
            "driver": versions["driver"], "nvcc": versions["nvcc"]["version"], "torch": versions["torch"].get("version"),
            "vLLM": versions["vllm"].get("version"),
            "rules failed": len([c for c in rule_checks_ if c.status == "fail"]),
            "rules passed": len([c for c in rule_checks_ if c.status == "pass"]),
            "rules skipped (unknown inputs)": len([c for c in rule_checks_ if c.status == "skip"]),
            "failed checks": ", ".join(failed) or "none",
        },
        "checks": [c.to_dict() for c in all_checks],
        "tables": [{"title": "Versions on this machine", "rows": versions_rows(versions)}],
        "charts": [{"title": "Install and compatibility checks", "figure": checks_chart(profile, tool_checks, rule_checks_)}],
        "versions": versions,
        "facts": facts,
    }
    if planmode.reason(profile, [g.get("name") for g in versions.get("gpus") or []]):  # plan mode: declared
        record["summary"].update({"driver": f"{profile.driver_version} (declared)" if profile.driver_version else None,
                                  "nvcc": f"{profile.cuda_toolkit} (declared)" if profile.cuda_toolkit else None,
                                  "GPU offload available": None})
    return record


def record(s: Session) -> dict:
    """Write records/02_install.json with its closing text, built (`build_record`) from what the steps kept in
    `s.results` and the rules the facts give (`rule_checks`, as the notebook shows them); its summary, to show."""
    facts = s.results.get("facts")
    s.record(NAME, build_record(s.profile, s.results.get("versions"), facts, s.results.get("toolchain_checks") or [],
                                rule_checks(facts)), closing=closing_text)
    return s.read(NAME)["summary"]


def what_this_means(s: Session):
    """The closing text as the record keeps it (written by `record`), as Markdown for the notebook's last cell."""
    return session.closing(s, NAME)


def closing_text(record: dict) -> str:
    """Markdown for the notebook's last cell (and the report), from the record: what to fix first."""
    bad = [c for c in record.get("checks") or [] if c["status"] in ("fail", "warn")]
    plan = record.get("plan_reason")
    head = (f"**Plan mode** — {plan}. The compatibility rules were evaluated on the profile's declared driver, CUDA "
            "toolkit and engine; the installation checks would run on the profile's box (not-run).\n\n") if plan else ""
    if not bad:
        return head + ("The profile's declared software is compatible." if plan else
                       "Everything the profile needs is installed and compatible with this machine.")
    lines = [head + f"{len(bad)} thing(s) to fix, most serious first:", ""]
    for c in sorted(bad, key=lambda c: c["status"] != "fail"):
        lines.append(f"- **{c['status']}: {c['name']}** — {c['observed']} (expected {c['expected']}). "
                     f"Fix: {c['fix']} *(source: {c['source']})*")
    return "\n".join(lines)
