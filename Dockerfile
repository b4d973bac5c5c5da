# syntax=docker/dockerfile:1
# Multi-stage build of the shop: a static, CGO-free binary (the SQLite driver
# is pure Go) on a distroless base that runs as a non-root user.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/seckill-lab/shop/internal/app.Version=${VERSION}" \
      -o /out/shop ./cmd/shop

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/shop /shop
# The embedded-SQLite demo default writes ./shop.db; give it a writable place.
WORKDIR /home/nonroot
USER nonroot:nonroot
EXPOSE 8080
# No HEALTHCHECK here: distroless has no shell, curl or wget to run one, and
# the shop has no health subcommand. Health is checked from outside instead:
# docker-compose.yml and nginx probe GET /healthz and /readyz over HTTP, as a
# Kubernetes httpGet probe would.
ENTRYPOINT ["/shop"]
CMD ["serve"]
