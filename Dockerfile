# The Molens node image: the wheel from scripts/dist with its server extra, run as a non-root user.
#   scripts/dist && docker build -t molens .
# Build arguments:
#   BASE             a Debian-based image with or without Python >= 3.11 (debian:bookworm-slim,
#                    python:3.11-slim or newer); Debian's python3 is installed when it has none
#   EXTRA_CA_CERTS   PEM certificates trusted by apt and pip during the build (a TLS-intercepting
#                    proxy); used in the build stage only: the image holds neither the file nor the value
# The image is one layer copied from the finished build stage: no compilers, no pip, no apt lists or
# caches, and no trace of the build arguments. Config: /etc/molens/node.yaml (mount your own) plus
# MOLENS_* variables; data: the volume /var/lib/molens. The default config reads the API token from
# /run/secrets/api_token (mount a file readable by uid 10001; the node refuses to start without it) and
# its graceful stop takes up to 42 s, beyond docker's default 10 s:
#   docker run -d --stop-timeout 60 -p 127.0.0.1:18081:18081 -v "$PWD/api_token:/run/secrets/api_token:ro" molens
# docs/deploy.md#containers.
ARG BASE=debian:bookworm-slim

FROM ${BASE} AS build
LABEL org.opencontainers.image.title=molens
ARG EXTRA_CA_CERTS=""
SHELL ["/bin/sh", "-eu", "-c"]
ENV DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN if [ -n "$EXTRA_CA_CERTS" ]; then \
        printf '%s\n' "$EXTRA_CA_CERTS" > /tmp/extra-ca.pem; \
        echo 'Acquire::https::CAInfo "/tmp/extra-ca.pem";' > /etc/apt/apt.conf.d/99extra-ca; \
    fi; \
    if ! python3 -c 'import sys, venv, ensurepip; assert sys.version_info >= (3, 11)' 2>/dev/null; then \
        apt-get update; \
        apt-get install -y --no-install-recommends python3 python3-venv ca-certificates; \
        rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb; \
    fi; \
    python3 -m venv /opt/molens
# the server's dependencies first (from setup.cfg), so a new wheel reuses this layer
COPY setup.cfg /tmp/setup.cfg
RUN if [ -f /tmp/extra-ca.pem ]; then \
        cat /etc/ssl/certs/ca-certificates.crt /tmp/extra-ca.pem > /tmp/ca-bundle.pem 2>/dev/null \
        || cp /tmp/extra-ca.pem /tmp/ca-bundle.pem; \
        export PIP_CERT=/tmp/ca-bundle.pem; \
    fi; \
    /opt/molens/bin/python -c 'import configparser; c = configparser.ConfigParser(); c.read("/tmp/setup.cfg"); print(c["options.extras_require"]["server"])' \
        | grep . > /tmp/server-requirements.txt; \
    /opt/molens/bin/pip install -r /tmp/server-requirements.txt
COPY dist/ /tmp/dist/
RUN set -- /tmp/dist/molens-*.whl; \
    [ "$#" -eq 1 ] && [ -f "$1" ] || { echo "need exactly one dist/molens-*.whl: run scripts/dist" >&2; exit 1; }; \
    /opt/molens/bin/pip install --no-deps "$1"; \
    /opt/molens/bin/python -c 'import molens.web.ui as u; assert (u.STATIC_DIR / "index.html").is_file(), "wheel without the console"'; \
    /opt/molens/bin/pip uninstall -y pip setuptools; \
    rm -rf /tmp/* /etc/apt/apt.conf.d/99extra-ca /root/.cache; \
    groupadd --system --gid 10001 molens; \
    useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/molens --shell /usr/sbin/nologin molens; \
    mkdir -p /var/lib/molens/data /etc/molens; \
    chown -R molens:molens /var/lib/molens
COPY conf/container/node.yaml /etc/molens/node.yaml

FROM scratch
LABEL org.opencontainers.image.title=molens
COPY --from=build / /
ENV PATH=/opt/molens/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 PYTHONUNBUFFERED=1
USER molens
WORKDIR /var/lib/molens
VOLUME ["/var/lib/molens"]
EXPOSE 18081 18091 18101
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=5s --timeout=4s --start-period=20s --retries=3 \
    CMD ["molens-node", "/etc/molens/node.yaml", "ready"]
ENTRYPOINT ["molens-node"]
CMD ["/etc/molens/node.yaml"]
