#!/bin/sh
# Installs moec's build and test dependencies from Debian packages. The one
# list of packages, used by tools/quickstart.sh and .ci/run.
#   flex, bison      the model-language front end
#   libcjson-dev     IR and fusion reports as JSON
#   zlib1g-dev       .fasta.gz data
#   clang, libclang-rt-14-dev   libFuzzer for `make fuzz`
#   mmseqs2-examples     20,000 UniProtKB proteins (training data)
#   microbiomeutil-data  5,181 16S rRNA genes (training data)
#   t-coffee-examples    10 proteases (small tests)
set -e
PKGS="make gcc flex bison libcjson-dev zlib1g-dev clang libclang-rt-14-dev
      mmseqs2-examples microbiomeutil-data t-coffee-examples"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $PKGS >/dev/null
