#!/usr/bin/env bash
# A real ext4 filesystem over the export: nbdfuse -> loop device -> ext4.
#
# Usage: fuse_ext4.sh URI
#   URI  nbd://127.0.0.1:PORT/EXPORT or nbd+unix:///EXPORT?socket=/path
#        (export >= 64 MiB; its whole content is overwritten by mkfs)
# Needs root, /dev/fuse, loop devices, nbdfuse, fusermount3, e2fsprogs.
#
# 1. nbdfuse exposes the export as WORK/fuse/disk (background process,
#    polled until the file shows the export size); losetup on that file;
#    mkfs.ext4 (inode tables and journal initialised eagerly, so no
#    background kernel writer); mount; copy in a generated tree (a few
#    hundred files of random sizes incl. empty ones, nested directories,
#    plus one 32 MiB file); umount; fsck.ext4 -n -f must be clean; detach
#    the loop device; fusermount3 -u; nbdfuse must exit.
# 2. A NEW nbdfuse (new NBD connection) + NEW loop device; mount read-only;
#    every file's sha256 (recorded from the source tree) and the file
#    count must match; umount; fsck.ext4 -n -f again.
# Everything (mounts, loop devices, nbdfuse, temp dir) is cleaned up by an
# EXIT trap, also on failure.  Exit 0 with a summary line; 1 with one line
# on stderr; 2 on setup errors.  NBD_INTEROP_TIMEOUT (default 120) bounds
# each step that talks to the server.
set -euo pipefail

NAME=fuse_ext4
fail() { echo "$NAME: FAIL: $*" >&2; exit 1; }
die() { echo "$NAME: ERROR: $*" >&2; exit 2; }

[[ $# -eq 1 ]] || die "usage: $0 URI"
URI=$1
TMO=${NBD_INTEROP_TIMEOUT:-120}
[[ $(id -u) -eq 0 ]] || die "must run as root (losetup/mount)"
for t in nbdfuse fusermount3 losetup mkfs.ext4 fsck.ext4 mount umount mountpoint \
         sha256sum timeout nbdinfo; do
    command -v "$t" >/dev/null || die "$t not found"
done
[[ -c /dev/fuse ]] || die "/dev/fuse missing"

START=$(date +%s.%N)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fuse_ext4.XXXXXX")
FUSE_DIR=$WORK/fuse
FS_DIR=$WORK/fs
SRC=$WORK/src
mkdir -p "$FUSE_DIR" "$FS_DIR" "$SRC"
FUSE_PID=
LOOP=

cleanup() {
    local rc=$?
    set +e
    if mountpoint -q "$FS_DIR"; then
        for _ in 1 2 3 4 5; do umount "$FS_DIR" 2>/dev/null && break; sleep 1; done
        mountpoint -q "$FS_DIR" && umount -l "$FS_DIR"
    fi
    if [[ -n $LOOP ]]; then losetup -d "$LOOP" 2>/dev/null; LOOP=; fi
    if mountpoint -q "$FUSE_DIR"; then
        for _ in 1 2 3 4 5; do fusermount3 -u "$FUSE_DIR" 2>/dev/null && break; sleep 1; done
        mountpoint -q "$FUSE_DIR" && fusermount3 -u -z "$FUSE_DIR"
    fi
    if [[ -n $FUSE_PID ]] && kill -0 "$FUSE_PID" 2>/dev/null; then
        kill "$FUSE_PID" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$FUSE_PID" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$FUSE_PID" 2>/dev/null
    fi
    [[ -n $FUSE_PID ]] && wait "$FUSE_PID" 2>/dev/null
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

EXPORT_SIZE=$(timeout 30 nbdinfo --size "$URI" 2>"$WORK/nbdinfo.err") ||
    die "nbdinfo --size $URI failed: $(tail -n1 "$WORK/nbdinfo.err")"
[[ $EXPORT_SIZE -ge $((64 * 1048576)) ]] || die "export is $EXPORT_SIZE bytes, need >= 64 MiB"

attach() { # start nbdfuse + loop device; sets FUSE_PID and LOOP
    nbdfuse "$FUSE_DIR/disk" "$URI" >"$WORK/nbdfuse.log" 2>&1 &
    FUSE_PID=$!
    local i
    for i in $(seq 300); do
        if [[ -f $FUSE_DIR/disk && $(stat -c %s "$FUSE_DIR/disk" 2>/dev/null) == "$EXPORT_SIZE" ]]; then
            break
        fi
        kill -0 "$FUSE_PID" 2>/dev/null ||
            fail "nbdfuse exited early: $(tail -n1 "$WORK/nbdfuse.log")"
        sleep 0.1
    done
    [[ -f $FUSE_DIR/disk ]] || fail "nbdfuse file did not appear within 30 s"
    local fsz
    fsz=$(stat -c %s "$FUSE_DIR/disk")
    [[ $fsz == "$EXPORT_SIZE" ]] || fail "nbdfuse file is $fsz bytes, export is $EXPORT_SIZE"
    LOOP=$(losetup -f --show "$FUSE_DIR/disk" 2>"$WORK/losetup.err") ||
        fail "losetup on nbdfuse file failed: $(tail -n1 "$WORK/losetup.err")"
}

detach() { # loop device off, fuse unmounted, nbdfuse gone
    sync
    losetup -d "$LOOP" 2>"$WORK/losetup.err" ||
        fail "losetup -d $LOOP failed: $(tail -n1 "$WORK/losetup.err")"
    LOOP=
    fusermount3 -u "$FUSE_DIR" 2>"$WORK/fusermount.err" ||
        fail "fusermount3 -u failed: $(tail -n1 "$WORK/fusermount.err")"
    local i
    for i in $(seq 100); do kill -0 "$FUSE_PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$FUSE_PID" 2>/dev/null && fail "nbdfuse still running 10 s after unmount"
    wait "$FUSE_PID" || fail "nbdfuse exited with an error: $(tail -n1 "$WORK/nbdfuse.log")"
    FUSE_PID=
}

fsck_clean() {
    local rc=0
    timeout "$TMO" fsck.ext4 -n -f "$LOOP" >"$WORK/fsck.log" 2>&1 || rc=$?
    [[ $rc -eq 0 ]] || fail "fsck.ext4 -n -f ($1) exit $rc: $(grep -v '^Pass\|^e2fsck\|^/dev' "$WORK/fsck.log" | head -n1)"
}

# Source tree: ~300 files in nested dirs, random sizes (0 .. 64 KiB, a few
# up to 512 KiB, some odd sizes), plus one 32 MiB file.
NFILES=0
for d in $(seq 0 11); do
    dir=$SRC/d$d/sub$((d % 3))
    mkdir -p "$dir"
    for f in $(seq 0 24); do
        case $((RANDOM % 10)) in
            0) sz=0 ;;
            1) sz=$((RANDOM % 512 * 1024 + RANDOM % 1024)) ;;
            2|3) sz=$((RANDOM % 100)) ;;
            *) sz=$((RANDOM * 2 % 65536)) ;;
        esac
        head -c "$sz" /dev/urandom >"$dir/file_${d}_$f.bin"
        NFILES=$((NFILES + 1))
    done
done
head -c $((32 * 1048576)) /dev/urandom >"$SRC/big_32MiB.bin"
NFILES=$((NFILES + 1))
(cd "$SRC" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$WORK/sums"
NBYTES=$(find "$SRC" -type f -printf '%s\n' | awk '{s+=$1} END{print s}')

# Pass 1: mkfs, fill, fsck.
attach
timeout "$TMO" mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$LOOP" \
    >"$WORK/mkfs.log" 2>&1 || fail "mkfs.ext4 failed: $(tail -n1 "$WORK/mkfs.log")"
mount -t ext4 "$LOOP" "$FS_DIR" 2>"$WORK/mount.err" ||
    fail "mount of fresh ext4 failed: $(tail -n1 "$WORK/mount.err")"
mkdir "$FS_DIR/tree"
timeout "$TMO" cp -a "$SRC/." "$FS_DIR/tree/" 2>"$WORK/cp.log" ||
    fail "copying the tree in failed: $(tail -n1 "$WORK/cp.log")"
sync
timeout "$TMO" umount "$FS_DIR" 2>"$WORK/umount.err" ||
    fail "umount after fill failed: $(tail -n1 "$WORK/umount.err")"
fsck_clean "after fill"
detach

# Pass 2: fresh connection and loop device, verify.
attach
mount -t ext4 -o ro "$LOOP" "$FS_DIR" 2>"$WORK/mount.err" ||
    fail "re-mount through new connection failed: $(tail -n1 "$WORK/mount.err")"
GOT_FILES=$(find "$FS_DIR/tree" -type f 2>"$WORK/find.err" | wc -l) ||
    fail "listing the tree after remount failed: $(head -n1 "$WORK/find.err")"
[[ $GOT_FILES -eq $NFILES ]] || fail "file count after remount is $GOT_FILES, expected $NFILES"
if ! (cd "$FS_DIR/tree" && timeout "$TMO" sha256sum -c --quiet "$WORK/sums") \
        >"$WORK/verify.log" 2>&1; then
    fail "checksum mismatch after remount: $(head -n1 "$WORK/verify.log")"
fi
timeout "$TMO" umount "$FS_DIR" 2>"$WORK/umount.err" ||
    fail "umount after verify failed: $(tail -n1 "$WORK/umount.err")"
fsck_clean "after remount"
detach

END=$(date +%s.%N)
echo "$NAME: OK ext4 on nbdfuse+loop: $NFILES files, $NBYTES bytes written, remounted via new" \
     "connection and verified by sha256, fsck clean twice," \
     "$(awk "BEGIN{printf \"%.1f\", $END - $START}")s"
