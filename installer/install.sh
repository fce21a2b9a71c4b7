#!/usr/bin/env bash
# optiond installer for Linux and macOS.
#
#   installer/install.sh [--prefix DIR] [--gpu | --no-gpu] [--no-gui] [--no-service] [--unit-dir DIR]
#                        [--bin-dir DIR] [--desktop-dir DIR] [--no-system-packages]
#                        [--source PATH_OR_SPEC] [--warmup-only NAMES | --no-warmup] [--uninstall]
#
# Creates a virtual environment under PREFIX (default ~/.local/share/optiond), installs optiond
# into it with the desktop panel (the gui extra; --no-gui skips it) and the GPU extra when
# nvidia-smi answers, compiles every pricing kernel once into numba's on-disk cache (`optiond
# warmup`; --warmup-only NAMES: those of `optiond warmup --list`; --no-warmup: none, the first
# run then compiles), links `optiond` and `optiond-panel` into BIN_DIR (default ~/.local/bin),
# writes the panel's menu entry (DESKTOP_DIR, default ~/.local/share/applications) and, on
# Linux, checks the X11 (xcb) libraries Qt needs: installs them with apt-get or dnf when run as
# root (not with --no-system-packages), else prints the command. Then writes the daemon's systemd
# user unit (Type=notify, watchdog, restart on failure), enables it where a systemd user manager
# runs, and runs `optiond status`. Everything it adds is listed in PREFIX/install-manifest.txt,
# which --uninstall reads to remove exactly that.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
prefix="${XDG_DATA_HOME:-$HOME/.local/share}/optiond"
bin_dir="$HOME/.local/bin"
unit_dir="${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user"
desktop_dir="${XDG_DATA_HOME:-$HOME/.local/share}/applications"
source_spec="$(dirname "$here")"
gpu=auto
gui=1
system_packages=1
service=1
uninstall=0
warmup=all
python=${PYTHON:-python3}

die() { echo "install.sh: $*" >&2; exit 1; }
say() { echo "==> $*"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    --bin-dir) bin_dir=$2; shift 2 ;;
    --unit-dir) unit_dir=$2; shift 2 ;;
    --desktop-dir) desktop_dir=$2; shift 2 ;;
    --source) source_spec=$2; shift 2 ;;
    --gpu) gpu=yes; shift ;;
    --no-gpu) gpu=no; shift ;;
    --no-gui) gui=0; shift ;;
    --no-system-packages) system_packages=0; shift ;;
    --no-service) service=0; shift ;;
    --uninstall) uninstall=1; shift ;;
    --warmup-only) warmup=$2; shift 2 ;;
    --no-warmup) warmup=none; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done

manifest="$prefix/install-manifest.txt"
unit_name=optiond.service

if [ "$uninstall" = 1 ]; then
  [ -f "$manifest" ] || die "nothing to uninstall: no $manifest"
  if command -v systemctl >/dev/null 2>&1 && grep -q "^unit " "$manifest" && systemctl --user show-environment >/dev/null 2>&1; then
    systemctl --user disable --now "$unit_name" >/dev/null 2>&1 || true
  fi
  # remove files and links first, then the directories (deepest first)
  while read -r what path; do
    case "$what" in
      file|link|unit) rm -f "$path" ;;
    esac
  done < "$manifest"
  grep "^dir " "$manifest" | awk '{print $2}' | sort -r | while read -r d; do rm -rf "$d"; done
  if command -v systemctl >/dev/null 2>&1 && systemctl --user show-environment >/dev/null 2>&1; then
    systemctl --user daemon-reload || true
  fi
  rm -f "$manifest"
  rmdir "$prefix" 2>/dev/null || true
  say "optiond removed from $prefix"
  exit 0
fi

command -v "$python" >/dev/null 2>&1 || die "$python not found: install Python >= 3.10"
"$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
  || die "Python >= 3.10 needed, found $("$python" -V 2>&1)"

mkdir -p "$prefix"
: > "$manifest.new"
record() { echo "$1 $2" >> "$manifest.new"; }
[ -d "$prefix/venv" ] || record dir "$prefix/venv"

say "virtual environment: $prefix/venv"
"$python" -m venv "$prefix/venv"
pip="$prefix/venv/bin/python -m pip"
$pip install -q --upgrade pip

extras=()
if [ "$gpu" = yes ] || { [ "$gpu" = auto ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }; then
  extras+=(gpu)
  say "NVIDIA GPU found: installing the GPU extra (CuPy)"
fi
[ "$gui" = 1 ] && extras+=(gui)
extra=""
[ ${#extras[@]} -gt 0 ] && extra="[$(IFS=,; echo "${extras[*]}")]"
$pip install -q "$source_spec$extra"

mkdir -p "$bin_dir"
ln -sf "$prefix/venv/bin/optiond" "$bin_dir/optiond"
record link "$bin_dir/optiond"

# every pricing kernel compiled once into numba's on-disk cache, before a daemon or a first chain
# needs it (a progress bar on a terminal, then what was compiled)
if [ "$warmup" != none ]; then
  say "compiling the pricing kernels once (optiond warmup; a minute or two)"
  only=()
  [ "$warmup" != all ] && only=(--only "$warmup")
  "$prefix/venv/bin/optiond" warmup ${only[@]+"${only[@]}"} || say "the warm-up did not finish: the first run compiles what is missing"
fi

if [ "$gui" = 1 ]; then
  ln -sf "$prefix/venv/bin/optiond-panel" "$bin_dir/optiond-panel"
  record link "$bin_dir/optiond-panel"
  if [ "$(uname -s)" = Linux ]; then
    # the panel's menu entry (freedesktop), starting the installed optiond-panel
    mkdir -p "$desktop_dir"
    entry="$desktop_dir/optiond-panel.desktop"
    "$prefix/venv/bin/python" -m optiond.gui.desktop entry --exec "$prefix/venv/bin/optiond-panel" > "$entry"
    record file "$entry"
    command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database -q "$desktop_dir" 2>/dev/null || true
    say "menu entry: $entry"
    # the X11 (xcb) libraries Qt's platform plugin needs: installed here when root, else named
    rc=0
    libs_cmd=$("$prefix/venv/bin/python" -m optiond.gui.desktop libs) || rc=$?
    if [ "$rc" = 0 ]; then
      say "Qt xcb libraries: all found"
    elif [ "$rc" = 1 ] && [ -n "$libs_cmd" ] && [ "$(id -u)" = 0 ] && [ "$system_packages" = 1 ]; then
      say "installing the X11 libraries the panel needs: $libs_cmd"
      case "$libs_cmd" in apt-get*) DEBIAN_FRONTEND=noninteractive apt-get update -qq || true ;; esac
      DEBIAN_FRONTEND=noninteractive sh -c "$libs_cmd" || say "could not install them: run '$libs_cmd' yourself"
    elif [ "$rc" = 1 ] && [ -n "$libs_cmd" ]; then
      say "the panel needs X11 libraries that are missing here; install them with: $libs_cmd"
    elif [ "$rc" = 1 ]; then
      say "the panel needs X11 libraries that are missing here (see above): install the packages that provide them"
    fi
  fi
fi

if [ "$service" = 1 ]; then
  mkdir -p "$unit_dir"
  unit="$unit_dir/$unit_name"
  "$prefix/venv/bin/optiond" service unit --exec "$prefix/venv/bin/optiond" > "$unit"
  record unit "$unit"
  if command -v systemctl >/dev/null 2>&1 && systemctl --user show-environment >/dev/null 2>&1; then
    systemctl --user daemon-reload
    systemctl --user enable --now "$unit_name"
    say "systemd user service $unit_name enabled and started"
  else
    say "no systemd user manager here: unit written to $unit (start the daemon with 'optiond serve --detach')"
  fi
fi
record dir "$prefix/venv"
sort -u "$manifest.new" > "$manifest"
rm -f "$manifest.new"

say "installed: $("$prefix/venv/bin/optiond" --version)"
"$prefix/venv/bin/optiond" status || say "the daemon is not running yet"
exit 0
