#!/usr/bin/env bash
# Makes a local CA and a certificate for each process of a geocount cluster, with openssl, for
# the topology's `[tls]` section (docs/operations.md, "TLS").
#
# Usage: scripts/make-certs.sh OUT_DIR TOPOLOGY        every process of the topology file
#        scripts/make-certs.sh OUT_DIR --names NAME...  the named processes only
#
# OUT_DIR gets ca.pem, and per process <name>.pem and <name>-key.pem, where <name> is
# `global`, `aggregator_<DC>` or `DC_<DC>_VAL_<n>`: `[tls] ca = "OUT_DIR/ca.pem"`,
# `cert_dir = "OUT_DIR"`. The CA's key goes to CA_DIR (default OUT_DIR-ca, beside it), never
# into OUT_DIR, which every process reads: keep it off the machines that run them. An existing
# CA in CA_DIR is kept and signs the new certificates.
# Certificates are valid for 127.0.0.1, ::1 and localhost, plus each of CERT_HOSTS (IP
# addresses or DNS names, space-separated), for 825 days, and each names its own process
# (subject CN=<name> and the URI geocount:<name>, which the other tiers read to tell which
# process calls them: each certificate serves and is presented as a client). Keys are EC P-256,
# readable by their owner only. The topology's `shards` lists must each be on one line.
set -euo pipefail

usage() {
  echo "usage: $0 OUT_DIR TOPOLOGY | $0 OUT_DIR --names NAME..." >&2
  exit 2
}
[[ $# -ge 2 ]] || usage
command -v openssl >/dev/null || {
  echo "make-certs.sh: openssl is needed (Debian: apt-get install openssl)" >&2
  exit 1
}

out=$1
shift
if [[ $1 == --names ]]; then
  shift
  [[ $# -ge 1 ]] || usage
  names=("$@")
else
  [[ -r $1 ]] || { echo "make-certs.sh: cannot read topology $1" >&2; exit 1; }
  # `global`, then per [[datacenters]] table its aggregator and one name per address in `shards`.
  mapfile -t names < <(awk '
    BEGIN { print "global" }
    /^\[\[datacenters\]\]/ { in_dc = 1; next }
    /^\[/ { in_dc = 0 }
    in_dc && /^name[ \t]*=/ { split($0, q, "\""); dc = q[2]; print "aggregator_" dc }
    in_dc && /^shards[ \t]*=/ {
      n = gsub(/"[^"]*"/, "&")
      for (i = 0; i < n; i++) print "DC_" dc "_VAL_" i
    }' "$1")
fi

ca_dir=${CA_DIR:-${out%/}-ca}
mkdir -p "$out" "$ca_dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
umask 077

sans="IP:127.0.0.1,IP:::1,DNS:localhost"
for host in ${CERT_HOSTS:-}; do
  if [[ $host =~ ^[0-9.]+$ || $host == *:* ]]; then sans+=",IP:$host"; else sans+=",DNS:$host"; fi
done

cat >"$work/ext.cnf" <<EOF
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[node]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = \$ENV::NODE_SANS
EOF

new_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
serial() { echo "0x$(openssl rand -hex 16)"; }

ca_key="$ca_dir/ca-key.pem"
if [[ ! -s $ca_dir/ca.pem || ! -s $ca_key ]]; then
  new_key "$ca_key"
  openssl req -new -key "$ca_key" -subj "/CN=geocount local CA" -out "$work/ca.csr"
  NODE_SANS=$sans openssl x509 -req -in "$work/ca.csr" -signkey "$ca_key" -days 3650 \
    -set_serial "$(serial)" -extfile "$work/ext.cnf" -extensions ca -out "$ca_dir/ca.pem" 2>/dev/null
  chmod 644 "$ca_dir/ca.pem"
  echo "made CA $ca_dir/ca.pem (its key: $ca_key)"
fi
cp "$ca_dir/ca.pem" "$out/ca.pem"
chmod 644 "$out/ca.pem"

for name in "${names[@]}"; do
  new_key "$out/$name-key.pem"
  openssl req -new -key "$out/$name-key.pem" -subj "/CN=$name" -out "$work/$name.csr"
  NODE_SANS="$sans,URI:geocount:$name" openssl x509 -req -in "$work/$name.csr" \
    -CA "$ca_dir/ca.pem" -CAkey "$ca_key" -days 825 -set_serial "$(serial)" \
    -extfile "$work/ext.cnf" -extensions node -out "$out/$name.pem" 2>/dev/null
  chmod 644 "$out/$name.pem"
done
echo "made ${#names[@]} certificate(s) in $out: ${names[*]}"
