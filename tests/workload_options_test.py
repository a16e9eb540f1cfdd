"""Bad command-line values of the workload scripts (tests/kws_conv_gru.py, tests/qat_lenet_fashion.py) are
refused by their parsers with a message naming the option, before anything runs; good values parse.
Run: /usr/bin/python3 tests/workload_options_test.py"""
import contextlib
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kws_conv_gru  # noqa: E402
import qat_lenet_fashion  # noqa: E402

BAD = {
    kws_conv_gru: [("--train-clips", "0"), ("--test-clips", "-3"), ("--epochs", "0"), ("--batch-size", "abc"),
                   ("--lr", "0"), ("--lr", "nan"), ("--lr", "inf"), ("--threads", "0"), ("--min-accuracy", "1.5"),
                   ("--min-accuracy", "-0.1")],
    qat_lenet_fashion: [("--train-samples", "-1"), ("--train-samples", "60001"), ("--test-samples", "0"),
                        ("--test-samples", "10001"), ("--float-epochs", "0"), ("--qat-epochs", "-1"),
                        ("--batch-size", "0"), ("--float-lr", "-1e-3"), ("--qat-lr", "nan"), ("--threads", "0"),
                        ("--calibration-batches", "0"), ("--min-accuracy", "2"), ("--max-drop", "-1"),
                        ("--max-drop", "101"), ("--calibration-batches", "200"), ("--float-lr", "x")],
}
GOOD = {
    kws_conv_gru: [[], ["--train-clips", "5", "--epochs", "1", "--lr", "0.5", "--min-accuracy", "1"]],
    qat_lenet_fashion: [[], ["--train-samples", "0", "--max-drop", "0", "--test-samples", "10000"],
                        ["--train-samples", "640", "--calibration-batches", "10"]],
}


def parse(module, argv):
    """(exit status or None, stderr) of the module's parser on argv."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            module.parse_args(["--edgetrain", "build/edgetrain"] + argv)
    except SystemExit as e:
        return e.code, err.getvalue()
    return None, err.getvalue()


failures = 0
for module, cases in BAD.items():
    for option, value in cases:
        code, message = parse(module, [f"{option}={value}"])
        # argparse names the option in its message; our own checks after parsing name it too
        ok = code == 2 and option in message and "error" in message
        failures += not ok
        print(f"{'PASS' if ok else 'FAIL'} {module.__name__} {option} {value}: "
              f"{message.strip().splitlines()[-1] if message.strip() else f'accepted (exit {code})'}")
    for argv in GOOD[module]:
        code, message = parse(module, argv)
        ok = code is None
        failures += not ok
        print(f"{'PASS' if ok else 'FAIL'} {module.__name__} {' '.join(argv) or 'defaults'} parses")
args = kws_conv_gru.parse_args(["--edgetrain", "e", "--epochs", "2", "--lr", "0.5"])
values_ok = args.epochs == 2 and args.lr == 0.5 and args.train_clips == 768
failures += not values_ok
print(f"{'PASS' if values_ok else 'FAIL'} parsed values kept")
print(f"workload options: {failures} failed")
sys.exit(1 if failures else 0)
