"""installed.py — the `meson install` layout for the deploy tests: installs the
build tree that built $SPECD into a temporary --destdir once per process and
says where the binary, the pages, the shipped config and the systemd unit
landed. Exits 77 (skip) when meson is missing."""
import glob, os, shutil, subprocess, sys, tempfile

_tree = None


def install_tree():
    """dict(destdir, specd, web, config, unit, prefix): paths inside the destdir
    (prefix is the install prefix the binary was configured with)."""
    global _tree
    if _tree:
        return _tree
    meson = shutil.which("meson")
    specd = os.environ.get("SPECD")
    if not meson or not specd:
        print("SKIP: meson or SPECD missing")
        sys.exit(77)
    build = os.path.dirname(os.path.dirname(os.path.abspath(specd)))
    dest = tempfile.mkdtemp(prefix="specd-install-")
    r = subprocess.run([meson, "install", "-C", build, "--destdir", dest, "--no-rebuild", "--quiet"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("meson install --destdir failed: " + (r.stdout + r.stderr)[-2000:])
    bins = glob.glob(os.path.join(dest, "**", "bin", "specd"), recursive=True)
    webs = glob.glob(os.path.join(dest, "**", "share", "specd", "web"), recursive=True)
    units = glob.glob(os.path.join(dest, "**", "systemd", "system", "specd@.service"), recursive=True)
    cfgs = glob.glob(os.path.join(dest, "**", "share", "specd", "config.yaml"), recursive=True)
    if len(bins) != 1 or len(webs) != 1 or len(units) != 1 or len(cfgs) != 1:
        raise RuntimeError("unexpected install layout under %s: bin %s web %s unit %s config %s"
                           % (dest, bins, webs, units, cfgs))
    prefix = os.path.dirname(os.path.dirname(bins[0]))[len(dest):]
    _tree = dict(destdir=dest, specd=bins[0], web=webs[0], config=cfgs[0], unit=units[0], prefix=prefix)
    return _tree


def cleanup():
    if _tree:
        shutil.rmtree(_tree["destdir"], ignore_errors=True)
