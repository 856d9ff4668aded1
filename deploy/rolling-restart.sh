#!/usr/bin/env bash
# rolling-restart.sh — restarts specd instances one at a time behind nginx
# without losing a stream: take the instance out of the upstream (`down`),
# reload nginx (new connections go elsewhere; open WebSockets stay on the old
# workers), stop it with SIGTERM (it finishes running requests within
# server.grace_ms and exits), start it again, wait for /healthz, put it back.
#
#   deploy/rolling-restart.sh SITE_CONF PORT...     e.g. /etc/nginx/conf.d/specd.conf 8081 8082
#
# Stopping and starting: SPECD_STOP / SPECD_START (shell commands with $PORT),
# default systemd: systemctl stop specd@$PORT / systemctl start specd@$PORT.
# NGINX_RELOAD overrides "nginx -s reload"; SPECD_SETTLE_S (1) is the pause after it.
set -euo pipefail
site=$1; shift
stop=${SPECD_STOP:-'systemctl stop specd@$PORT'}
start=${SPECD_START:-'systemctl start specd@$PORT'}
reload=${NGINX_RELOAD:-'nginx -s reload'}
settle=${SPECD_SETTLE_S:-1}   # seconds for nginx's new workers to take over before the SIGTERM
for PORT in "$@"; do
  export PORT
  echo "rolling-restart: $PORT out of rotation"
  sed -i -E "s|^(\s*server 127\.0\.0\.1:$PORT\b[^;]*)( down)?;|\1 down;|" "$site"
  eval "$reload"
  sleep "$settle"
  echo "rolling-restart: $PORT stopping (drains running requests)"
  eval "$stop"
  echo "rolling-restart: $PORT starting"
  eval "$start"
  for _ in $(seq 1 600); do
    curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
    sleep 0.2
  done
  curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null
  sed -i -E "s|^(\s*server 127\.0\.0\.1:$PORT\b[^;]*) down;|\1;|" "$site"
  eval "$reload"
  echo "rolling-restart: $PORT back in rotation"
done
