"""What the tiers of tests/unit/test_reliability_hostile_servers.py share: the key a hostile server echoes and the
terminal escapes a hostile log carries, defined once."""

KEY = "Zq3x/9VbN7mKp2Lr8Tw5YhG4dF6sA1cE0uJ3iO7pL2kM9nB5vC8xZ1qW4eR6tY0u"  # 64 characters, a `/` in it
# Terminal escapes a log may carry: each must be gone from what `lab doctor` prints (issue 36 item 11).
ESCAPES = {"OSC 52 clipboard (BEL)": "\x1b]52;c;cm0gLXJmIH4K\x07", "OSC 52 (ST)": "\x1b]52;c;cm0gLXJmIH4K\x1b\\",
           "OSC 8 link": "\x1b]8;;http://203.0.113.9/\x1b\\click\x1b]8;;\x1b\\", "OSC 0 title": "\x1b]0;pwned\x07",
           "colour": "\x1b[1;31m", "CSI clear screen": "\x1b[2J", "CSI private": "\x1b[?1049h", "DCS": "\x1bPq#0\x1b\\",
           "C1 CSI": "\x9b2J", "C1 OSC": "\x9d0;x\x9c", "charset": "\x1b(0", "bell": "\x07", "backspace": "\x08\x08",
           "lone CR": "\rOK   ", "unterminated OSC": "\x1b]52;c;cm0gLXJm"}
