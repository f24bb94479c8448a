"""lab.core.versions: the one version parser, and every module that compares versions using it (pure)."""
import pytest

from lab.core import versions
from lab.diagnose import knowledge_base
from lab.predict import compat_predicates
from lab.serving import byhand_choices, vllm_command


def test_release_numbers():
    assert versions.version_tuple("535.129.03") == (535, 129, 3)
    assert versions.version_tuple("2.7.1+cu126") == (2, 7, 1)
    assert versions.version_tuple("0.10.1.1") > versions.version_tuple("0.10.1")
    assert versions.version_tuple("v0.4.2") == (0, 4, 2) and versions.version_tuple(12.2) == (12, 2)
    assert versions.version_tuple("release 12.8, V12.8.93") == (12, 8)  # nvcc --version's line
    with pytest.raises(ValueError):
        versions.version_tuple("latest")


def test_tags_count_as_their_release():
    assert versions.version_tuple("0.10.1.post1") == (0, 10, 1)
    assert versions.at_least("0.10.1", "0.10.1") and versions.at_least("0.10.1.post1", "0.10.1")
    assert versions.at_least("0.18", "0.18.0") and not versions.at_least("0.4.2", "0.5.2")
    assert versions.at_least("v0.11.0rc1", "0.11.0") and not versions.at_least("0.10.1.post1", "0.10.2")


def test_every_caller_uses_the_one_parser():
    """Engine rules, compatibility rules, the by-hand build and troubleshooting conditions once had four
    parsers that read "0.10.1.post1" as (0, 10, 1, 1), (0, 10, 1) or (0, 10, 1) with "+cu126" dropped."""
    assert vllm_command.at_least is versions.at_least
    assert compat_predicates.version_tuple is versions.version_tuple
    assert byhand_choices.version_tuple is versions.version_tuple
    assert knowledge_base._compare(">=", "0.10.1.post1", "0.10.1") is True
    assert knowledge_base._compare("<", "0.10.1.post1", "0.10.2") is True
    assert knowledge_base._compare("<", "Linux", "Windows") is True  # no version in either: compared as text
