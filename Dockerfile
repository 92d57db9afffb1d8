# walfeed-server and the walfeed CLI in a Debian 12 image, built from this
# checkout with the same scripts the tests run:
#
#   docker build -t walfeed .
#   docker run --rm -v $PWD/walfeed.yaml:/etc/walfeed/walfeed.yaml:ro -p 50051:50051 walfeed
#
# Stage 1 installs the build dependencies (deploy/install-deps.sh --build) and
# builds without the tests; stage 2 installs only the packages whose shared
# libraries the binaries load (deploy/runtime-packages.sh lists them) and runs
# as an unprivileged user. deploy/docker-compose.yml and deploy/k8s/ use it.

FROM debian:12 AS build
WORKDIR /src
COPY deploy/install-deps.sh deploy/install-deps.sh
RUN bash deploy/install-deps.sh --build
COPY . .
RUN cmake -S . -B /build -DWALFEED_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
 && cmake --build /build --target walfeed-server walfeed -j"$(nproc)" \
 && DESTDIR=/out cmake --install /build --prefix /usr/local \
 && bash deploy/runtime-packages.sh /out/usr/local/bin/walfeed-server /out/usr/local/bin/walfeed \
      > /out/runtime-packages

FROM debian:12-slim
COPY --from=build /out/runtime-packages /tmp/runtime-packages
RUN apt-get update \
 && xargs -a /tmp/runtime-packages apt-get install -y -q --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages \
 && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin walfeed \
 && install -d -o walfeed -g walfeed -m 0700 /var/lib/walfeed
COPY --from=build /out/usr/local /usr/local
USER walfeed
EXPOSE 50051 9464
ENTRYPOINT ["/usr/local/bin/walfeed-server"]
CMD ["--config", "/etc/walfeed/walfeed.yaml", "--log-format", "json"]
