"""PASS/FAIL bookkeeping shared by the script tests: each check prints one line, summary() the totals."""
failures = []
count = 0


def expect(name, condition, detail=""):
    global count
    count += 1
    print(f"{'PASS' if condition else 'FAIL'} {name}" + (f": {detail}" if not condition else ""))
    if not condition:
        failures.append(name)


def summary(suite):
    """Prints the totals; returns the exit status (1 when a check failed)."""
    print(f"{suite}: {count - len(failures)}/{count} checks passed")
    return 1 if failures else 0
