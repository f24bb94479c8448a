"""lab.model.xcheck_logits: llama-cpp-python's logits come from a child process, and a child that dies says how."""
from lab.model import xcheck_logits


def test_how_a_child_ended_is_said_in_words():
    assert xcheck_logits.how_it_ended(-11) == "killed by SIGSEGV"
    assert xcheck_logits.how_it_ended(1) == "exit code 1"
    assert xcheck_logits.how_it_ended(-200) == "killed by signal 200"
