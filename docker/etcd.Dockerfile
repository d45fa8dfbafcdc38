# etcd for docker/docker-compose.cluster.yml: Debian's etcd-server, plus etcd-client for the
# healthcheck's etcdctl. Build from the repository root:
#   docker build -f docker/etcd.Dockerfile -t shoal-etcd .
#
# Build arguments:
#   ETCD_BASE_IMAGE   a Debian image (bookworm has etcd 3.4). Where no registry is reachable,
#                     make test-compose builds one with etcd already installed from Debian
#                     packages (shoal-etcd-base:bookworm, tests/compose/engine.py); then this
#                     build installs nothing and needs no network.
#
# Runs as the unprivileged user etcd with its data on the /var/lib/etcd volume; client port
# 2379, peer port 2380. The flags (name, URLs, cluster) come from the compose file.

ARG ETCD_BASE_IMAGE=debian:bookworm-slim
FROM ${ETCD_BASE_IMAGE}
RUN if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then \
      apt-get update -qq \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
           etcd-server etcd-client \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && (getent passwd etcd >/dev/null || useradd --system --uid 10002 --user-group \
       --home-dir /var/lib/etcd --no-create-home etcd) \
 && mkdir -p /var/lib/etcd \
 && chown etcd:etcd /var/lib/etcd \
 && chmod 700 /var/lib/etcd
ENV ETCDCTL_API=3
USER etcd
WORKDIR /var/lib/etcd
VOLUME ["/var/lib/etcd"]
EXPOSE 2379 2380
HEALTHCHECK --interval=5s --timeout=5s --start-period=10s --retries=10 \
    CMD ["etcdctl", "--endpoints=http://127.0.0.1:2379", "endpoint", "health"]
ENTRYPOINT ["etcd"]
