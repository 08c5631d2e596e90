"""Run a client's own unittest suite, unmodified (openstacksdk's functional
baremetal tests, ironic-tempest-plugin's API tests):

    unittestrun.py RESULTS SUITE_DIR TOP_DIR

discovers the tests under SUITE_DIR (imported as packages below TOP_DIR)
and writes one JSON line per test event to RESULTS: {"id", "status",
"message"}; status is start, pass, fail or skip; message is the last line
of the error (the exception raised) or the skip reason. A class whose
setUpClass fails is one failed row named after it, as unittest reports it.
The tests' own logging and unittest's text output go to stdout and
stderr."""
import json
import sys
import traceback
import unittest

def last_line(text):
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    return lines[-1] if lines else ""


class Result(unittest.TextTestResult):
    out = None

    def _row(self, test, status, message=""):
        # Written as each test starts and ends so that a run killed for
        # hanging (the suite's waits have no timeout) still says where.
        self.out.write(json.dumps({"id": test.id(), "status": status, "message": message}) + "\n")
        self.out.flush()

    def startTest(self, test):
        super().startTest(test)
        self._row(test, "start")

    def addSuccess(self, test):
        super().addSuccess(test)
        self._row(test, "pass")

    def addError(self, test, err):
        super().addError(test, err)
        self._row(test, "fail", last_line(self.errors[-1][1]))

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._row(test, "fail", last_line(self.failures[-1][1]))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._row(test, "skip", reason)

    # unittest's own verdicts: an expected failure passes, an unexpected
    # success does not.
    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._row(test, "pass")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._row(test, "fail", "unexpected success")


def main():
    try:
        suite = unittest.defaultTestLoader.discover(sys.argv[2], top_level_dir=sys.argv[3])
    except Exception:
        traceback.print_exc()
        return 2
    with open(sys.argv[1], "w") as out:
        Result.out = out
        unittest.TextTestRunner(stream=sys.stderr, verbosity=2, resultclass=Result).run(suite)
    return 0


if __name__ == "__main__":
    sys.exit(main())
