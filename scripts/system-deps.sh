#!/bin/sh
# Installs the Debian packages the test suite and `agora local --masters N` use, when missing and
# when we may (root + apt): iproute2 (network namespaces), zookeeper (HA; brings a Java runtime),
# chromium (the dashboard's browser tests), prometheus (scraping the metrics endpoints), a C
# compiler (the agent builds its C task wrapper with it; without one it uses the Python wrapper)
# and musl (the wrapper built with it starts in a third of the CPU; without it, glibc's),
# runc, umoci and skopeo (tasks from images) and busybox-static (the tests' image).
set -e
missing=""
command -v ip >/dev/null 2>&1 || missing="$missing iproute2"
[ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null 2>&1 || missing="$missing zookeeper"
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
command -v prometheus >/dev/null 2>&1 || missing="$missing prometheus"
command -v cc >/dev/null 2>&1 && [ -f /usr/include/stdio.h ] || missing="$missing gcc libc6-dev"
command -v musl-gcc >/dev/null 2>&1 || missing="$missing musl-tools"
# Tasks from images (issue 35): runc runs them, umoci unpacks OCI images, skopeo copies them
# (registries, archives), busybox-static is
# what the tests build their image from (offline).
command -v runc >/dev/null 2>&1 || missing="$missing runc"
command -v umoci >/dev/null 2>&1 || missing="$missing umoci"
command -v skopeo >/dev/null 2>&1 || missing="$missing skopeo"
[ -x /bin/busybox ] || missing="$missing busybox-static"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing:$missing"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
else
  echo "note: missing$missing; install them (apt-get install$missing) for the tests that need them" >&2
fi
