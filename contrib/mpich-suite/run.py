#!/usr/bin/env python3
"""Run MPICH's MPI test suite (test/mpi of an MPICH source tree) against Open MPI with a
chosen PML, and compare the failures with a reference PML.

MPICH's suite is not part of this repository: point --mpich at a checkout or release tree
of MPICH (tested with v3.4.3, whose tests stay within MPI 3.1, the level of Open MPI 4.1).
Nothing is written into that tree: objects, programs and logs go to --work, with an
mpitestconf.h for Linux and Open MPI 4.1 (a configured tree's own test/mpi/include/
mpitestconf.h takes precedence: the tests include it with quotes).

For each directory given (pt2pt, threads/pt2pt, comm, coll, ...), each line of its testlist
("name nprocs [key=value ...]") is built with mpicc from name.c, or from the sources and
CPPFLAGS its Makefile.am gives, linked with MPICH's test utilities (util/mtest*.c,
dtypes.c), and run under `mpirun --oversubscribe -np N --mca pml PML`, with a time limit.
A test passes as MPICH's runtests decides: exit status 0 and a " No Errors" line, or, for
resultTest=TestStatus and TestErrFatal, a non-zero exit status. Tests needing an MPI
version above 3.1 (mpiversion=) or more memory than a laptop (mem=) are skipped.

Every test that fails under --pml is then run again under --ref (default ob1): a failure
under both is Open MPI's or the test's, one under --pml alone is the PML's. The summary
lists both kinds; each failure's output is in WORK/DIR/NAME.PML.log.

Usage (from a build tree of mpiv, or with the component installed):
  contrib/mpich-suite/run.py --mpich ~/src/mpich-3.4.3 --work /tmp/mpich-suite \\
      [--builddir BUILD] [--pml mpiv] [--ref ob1] [--mca "--mca pml_mpiv_progress server"] \\
      [--timeout 60] [--only NAME,...] DIR [DIR ...]
Exit status: 0 when nothing fails under --pml alone, 1 otherwise, 2 on bad usage.
"""
import argparse
import os
import shlex
import subprocess
import sys
import time

# The configure results MPICH's test utilities read (mpitestconf.h), for Linux and
# Open MPI 4.1 (MPI 3.1, POSIX threads).
MPITESTCONF = """\
#define HAVE_STDIO_H 1
#define HAVE_STDLIB_H 1
#define HAVE_STRING_H 1
#define HAVE_STDINT_H 1
#define HAVE_UNISTD_H 1
#define HAVE_STDARG_H 1
#define HAVE_SYS_TIME_H 1
#define HAVE_SYS_RESOURCE_H 1
#define HAVE_GETRUSAGE 1
#define HAVE_LONG_DOUBLE 1
#define HAVE_LONG_LONG_INT 1
#define HAVE_LONG_LONG 1
#define HAVE__BOOL 1
#define HAVE_FLOAT__COMPLEX 1
#define HAVE_DOUBLE__COMPLEX 1
#define HAVE_LONG_DOUBLE__COMPLEX 1
#define HAVE_MPI_TYPE_CREATE_STRUCT 1
#define HAVE_MPI2_COMBINERS 1
#define HAVE_MPI_INIT_THREAD 1
#define HAVE_MPI_WIN_CREATE 1
#define HAVE_PTHREAD_H 1
#define THREAD_PACKAGE_NAME 2
#define HAVE_MTEST_THREAD_BARRIER 1
#define MPI_SIZEOF_LONG_DOUBLE 16
#define HAVE_INLINE 1
#define MTEST_HAVE_MIN_MPI_VERSION(a, b) \\
    ((MPI_VERSION > (a)) || (MPI_VERSION == (a) && MPI_SUBVERSION >= (b)))
"""
UTIL = ("mtest", "mtest_common", "dtypes", "mtest_thread")


def die(msg):
    print(f"run.py: {msg}", file=sys.stderr)
    sys.exit(2)


def makefile_am(path):
    """NAME_SOURCES and NAME_CPPFLAGS of a Makefile.am (continuation lines joined)."""
    vals = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            text = f.read().replace("\\\n", " ")
        for line in text.splitlines():
            key, eq, val = line.partition("=")
            key = key.strip().rstrip("+")
            if eq and (key.endswith("_SOURCES") or key.endswith("_CPPFLAGS")):
                vals[key] = val.strip()
    return vals


def testlist(path):
    """(name, nprocs, options) of each runnable line; configure-substituted lines skipped."""
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if not line or line.startswith("#") or "@" in line:
            continue
        parts = line.split()
        opts = {"arg": [], "env": {}}
        for kv in parts[2:]:
            key, _, val = kv.partition("=")
            if key == "arg":
                opts["arg"].append(val)
            elif key == "env":
                ek, _, ev = val.partition("=")
                opts["env"][ek] = ev
            else:
                opts[key] = val
        yield parts[0], parts[1], opts, " ".join(parts[1:])


class Suite:
    def __init__(self, args):
        self.a = args
        self.top = args.mpich
        if os.path.isdir(os.path.join(self.top, "test", "mpi")):
            self.top = os.path.join(self.top, "test", "mpi")
        if not os.path.exists(os.path.join(self.top, "util", "mtest.c")):
            die(f"--mpich {args.mpich}: no test/mpi/util/mtest.c there")
        self.work = os.path.abspath(args.work)
        os.makedirs(os.path.join(self.work, "include"), exist_ok=True)
        with open(os.path.join(self.work, "include", "mpitestconf.h"), "w",
                  encoding="utf-8") as f:
            f.write(MPITESTCONF)
        self.incs = ["-I" + os.path.join(self.work, "include"),
                     "-I" + os.path.join(self.top, "include")]
        self.util = []
        for name in UTIL:
            obj = os.path.join(self.work, name + ".o")
            if not os.path.exists(obj):
                self.compile(["-c", os.path.join(self.top, "util", name + ".c"), "-o", obj],
                             fatal=True)
            self.util.append(obj)
        self.pml_args = {}
        self.env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
                        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")

    def compile(self, argv, fatal=False):
        r = subprocess.run(["mpicc", "-O1", "-g", "-w"] + self.incs + argv,
                           capture_output=True, text=True, check=False)
        if r.returncode != 0 and fatal:
            die("mpicc failed:\n" + r.stderr[-2000:])
        return r.returncode == 0

    def mpirun_args(self, pml):
        """mpirun's arguments for PML (made once per PML: ompi_info is slow)."""
        if pml not in self.pml_args:
            args = ["--mca", "pml", pml]
            if pml == "mpiv" and self.a.builddir:
                b = os.path.abspath(self.a.builddir)
                pkglib = subprocess.run(["ompi_info", "--path", "pkglibdir", "--parsable"],
                                        capture_output=True, text=True, check=False)
                pkglib = pkglib.stdout.strip().split(":")[-1]
                args += ["--mca", "mca_base_component_path",
                         f"{b}/ompi-component/.libs:{pkglib}",
                         "-x", f"LD_LIBRARY_PATH={b}/.libs:{b}/ompi-component/.libs"]
            if pml == self.a.pml:
                args += shlex.split(self.a.mca)
            self.pml_args[pml] = args
        return self.pml_args[pml]

    def build(self, d, name):
        """The program of test NAME in directory D, or None when it does not build."""
        exe = os.path.join(self.work, d, name)
        if os.path.exists(exe):
            return exe
        am = makefile_am(os.path.join(self.top, d, "Makefile.am"))
        srcs = am.get(name + "_SOURCES", name + ".c").split()
        srcs = [os.path.join(self.top, d, s) for s in srcs]
        cpp = [x for x in am.get(name + "_CPPFLAGS", "").split() if not x.startswith("$(")]
        if not all(os.path.exists(s) for s in srcs):
            return None
        ok = self.compile(["-I" + os.path.join(self.top, d)] + cpp + srcs + self.util +
                          ["-lpthread", "-lm", "-o", exe])
        return exe if ok else None

    def run(self, d, name, np, opts, pml):
        exe = os.path.join(self.work, d, name)
        limit = min(int(opts.get("timeLimit", self.a.timeout)), self.a.timeout)
        cmd = (["timeout", "-k", "5", str(limit), "mpirun", "--oversubscribe", "-np", np] +
               self.mpirun_args(pml) + [exe] + opts["arg"])
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, check=False,
                           env=dict(self.env, **opts["env"]), cwd=os.path.dirname(exe))
        out = p.stdout + p.stderr
        if p.returncode in (124, 137):
            verdict = "timeout"
        elif opts.get("resultTest") in ("TestStatus", "TestErrFatal"):
            verdict = "pass" if p.returncode != 0 else "fail"
        else:
            verdict = ("pass" if p.returncode == 0 and any(
                l.strip() in ("No Errors", "No errors") for l in out.splitlines())
                else "fail")
        if verdict != "pass":
            with open(f"{exe}.{pml}.log", "w", encoding="utf-8") as f:
                f.write(" ".join(cmd) + "\n" + out)
        return verdict, time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mpich", required=True, help="MPICH source tree (or its test/mpi)")
    ap.add_argument("--work", required=True, help="directory for programs and logs")
    ap.add_argument("--builddir", help="mpiv build tree whose component to use (default: "
                    "the installed one)")
    ap.add_argument("--pml", default="mpiv", help="PML under test (default mpiv)")
    ap.add_argument("--ref", default="ob1", help="reference PML for the failures (default "
                    "ob1; 'none': no second run)")
    ap.add_argument("--mca", default="", help="more mpirun arguments for --pml, quoted")
    ap.add_argument("--timeout", type=int, default=60, help="seconds per test (default 60)")
    ap.add_argument("--only", help="comma-separated test names")
    ap.add_argument("dirs", nargs="+", help="directories of test/mpi, e.g. pt2pt threads/pt2pt")
    a = ap.parse_args()
    suite = Suite(a)
    only = set(a.only.split(",")) if a.only else None
    rows = []
    for d in a.dirs:
        tl = os.path.join(suite.top, d, "testlist")
        tl = tl if os.path.exists(tl) else tl + ".in"
        if not os.path.exists(tl):
            die(f"{d}: no testlist in {suite.top}/{d}")
        os.makedirs(os.path.join(suite.work, d), exist_ok=True)
        for name, np, opts, line in testlist(tl):
            if only and name not in only:
                continue
            if opts.get("mpiversion", "3.1") > "3.1" or "mem" in opts:
                continue
            if suite.build(d, name) is None:
                rows.append((d, name, line, "nobuild", None))
                print(f"{d}/{name} {line}: does not build", flush=True)
                continue
            verdict, secs = suite.run(d, name, np, opts, a.pml)
            ref = None
            if verdict != "pass" and a.ref != "none":
                ref, _ = suite.run(d, name, np, opts, a.ref)
            rows.append((d, name, line, verdict, ref))
            print(f"{d}/{name} {line}: {verdict} ({secs:.1f} s)"
                  + (f", {a.ref}: {ref}" if ref else ""), flush=True)
    ran = [r for r in rows if r[3] != "nobuild"]
    passed = sum(r[3] == "pass" for r in ran)
    own = [r for r in ran if r[3] != "pass" and r[4] == "pass"]
    both = [r for r in ran if r[3] != "pass" and r[4] != "pass"]
    print(f"\n{a.pml}: {passed} of {len(ran)} passed; {len(rows) - len(ran)} did not build")
    if a.ref == "none":
        own, both = both, []
    print(f"failing under {a.pml} and {a.ref}: {len(both)}")
    for r in both:
        print(f"  {r[0]}/{r[1]} {r[2]}: {r[3]}, {a.ref} {r[4]}")
    print(f"failing under {a.pml} only: {len(own)}")
    for r in own:
        print(f"  {r[0]}/{r[1]} {r[2]}: {r[3]}")
    return 1 if own else 0


if __name__ == "__main__":
    sys.exit(main())
