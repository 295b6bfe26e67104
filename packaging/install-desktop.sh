#!/usr/bin/env bash
# Add mgpu-gui to the current user's application menu: the desktop entry and
# the app icon, under $XDG_DATA_HOME (default ~/.local/share). No root needed.
#
#   install-desktop.sh [--exec PATH] [--uninstall]
#
#   --exec PATH   the mgpu-gui executable the menu entry starts. Default: the
#                 bundle's mgpu-gui when this script sits in a bundle folder,
#                 else this checkout's .venv/bin/mgpu-gui, else mgpu-gui on PATH.
#   --uninstall   remove what an install wrote.
#
# Writes applications/mgpu-gui.desktop (Exec set to that absolute path) and
# icons/hicolor/{16x16,...,256x256}/apps/mgpu-gui.png + scalable/apps/mgpu-gui.svg.
# Works from a checkout (packaging/) and from a bundle folder (dist/mgpu-gui/).
set -euo pipefail

NAME=mgpu-gui
SIZES=(16 32 48 64 128 256)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
data=${XDG_DATA_HOME:-}
[[ $data == /* ]] || data=$HOME/.local/share  # the spec: relative values are ignored
apps=$data/applications
icons=$data/icons/hicolor

die() { echo "install-desktop: $*" >&2; exit 1; }

exec_path="" uninstall=0
while (($#)); do
    case $1 in
        --exec) (($# >= 2)) || die "--exec needs a path"; exec_path=$2; shift 2 ;;
        --exec=*) exec_path=${1#--exec=}; shift ;;
        --uninstall) uninstall=1; shift ;;
        -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done

if ((uninstall)); then
    rm -f "$apps/$NAME.desktop" "$icons/scalable/apps/$NAME.svg"
    for size in "${SIZES[@]}"; do rm -f "$icons/${size}x${size}/apps/$NAME.png"; done
    echo "removed $apps/$NAME.desktop and the $NAME icons under $icons"
    exit 0
fi

# What to install: a bundle folder holds the entry next to this script and the
# icons as package data; a checkout has them in packaging/ and resources/icons/.
template=$here/$NAME.desktop
[[ -f $template ]] || die "no $NAME.desktop next to this script"
icon_dir=""
for candidate in "$here/../resources/icons" "$here/_internal/mgpu_gui/resources/icons"; do
    [[ -f $candidate/$NAME.svg ]] && { icon_dir=$candidate; break; }
done
[[ -n $icon_dir ]] || die "the $NAME icons were not found near $here"

if [[ -z $exec_path ]]; then
    for candidate in "$here/$NAME" "$here/../.venv/bin/$NAME"; do
        [[ -x $candidate && ! -d $candidate ]] && { exec_path=$candidate; break; }
    done
    [[ -n $exec_path ]] || exec_path=$(command -v "$NAME" || true)
    [[ -n $exec_path ]] || die "no $NAME executable found: install the app first" \
        "(pip install -e .), or give --exec PATH"
fi
[[ -x $exec_path && ! -d $exec_path ]] || die "--exec $exec_path is not an executable file"
# Absolute, without resolving links (a venv's script must keep its own path).
exec_path=$(cd "$(dirname "$exec_path")" && pwd)/$(basename "$exec_path")

# Desktop Entry spec: Exec arguments with reserved characters are double-quoted
# with \ before " ` $ \; % is doubled; then the string itself escapes \ as \\.
escape_string() { local s=${1//\\/\\\\}; printf '%s' "$s"; }
quote_exec() {
    local p=${1//%/%%}
    if [[ ! $p =~ ^[A-Za-z0-9/._+,:=@%-]+$ ]]; then
        p=${p//\\/\\\\}; p=${p//\"/\\\"}; p=${p//\`/\\\`}; p=${p//\$/\\\$}
        p="\"$p\""
    fi
    escape_string "$p"
}
[[ $exec_path != *$'\n'* ]] || die "the executable's path holds a line break"

mkdir -p "$apps" "$icons/scalable/apps"
tmp=$(mktemp "$apps/.$NAME.desktop.XXXXXX")
while IFS= read -r line || [[ -n $line ]]; do
    case $line in
        Exec=*) printf 'Exec=%s\n' "$(quote_exec "$exec_path")" ;;
        TryExec=*) printf 'TryExec=%s\n' "$(escape_string "$exec_path")" ;;
        *) printf '%s\n' "$line" ;;
    esac
done < "$template" > "$tmp"
chmod 644 "$tmp"
mv -f "$tmp" "$apps/$NAME.desktop"

install -m 644 "$icon_dir/$NAME.svg" "$icons/scalable/apps/$NAME.svg"
for size in "${SIZES[@]}"; do
    install -D -m 644 "$icon_dir/$NAME-$size.png" "$icons/${size}x${size}/apps/$NAME.png"
done
touch "$icons"  # icon caches check the theme folder's time

echo "installed $apps/$NAME.desktop (starts $exec_path) and the $NAME icons under $icons"
