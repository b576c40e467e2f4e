#!/bin/sh
# Names the Debian package for each missing build dependency, instead of
# letting the compiler fail on a missing header.
missing=""
command -v flex  >/dev/null 2>&1 || missing="$missing flex"
command -v bison >/dev/null 2>&1 || missing="$missing bison"
command -v cc    >/dev/null 2>&1 || missing="$missing gcc"
[ -f /usr/include/cjson/cJSON.h ] || missing="$missing libcjson-dev"
[ -f /usr/include/zlib.h ]        || missing="$missing zlib1g-dev"
if [ -n "$missing" ]; then
    echo "moec build: missing dependencies. Install them with:" >&2
    echo "    apt-get install -y$missing" >&2
    exit 1
fi
