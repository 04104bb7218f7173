#!/usr/bin/env bash
# Packs what the GPU machine needs into .device/ (git-ignored), to travel with the device tool's `carry: [".device"]`.
# The GPU machine has no JDK, so a Java runtime goes along (../shared/docs/java-stack.md, section 5):
#   .device/rt.tar.xz   jlink'ed runtime: the modules jdeps finds in ds4j and its dependencies, --compress=zip-0 and
#                       stripped, shipped as xz (rebuilt only when missing or the module list changes)
#   .device/app.tar.xz  app/ds4j.jar (with native/linux-x86_64/libds4j_gpu.so), app/lib/*.jar (runtime dependencies; the
#                       tokenizers jar keeps only its linux-x86_64 native), app/tests.jar (test classes, no resources:
#                       the fixtures travel with the working tree) and app/junit-console.jar
# Everything carried stays under 46 MiB so that, with the working tree (~20 MiB), a call stays under 64 MiB;
# DS4J_GPU_LINEINFO=0 builds the library without line info (a smaller bundle: room for tools/device/pack-lib.sh's).
# usage: tools/device/pack.sh            (builds into target-device/ with -Dbuild.dir, never touching target/)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
source bin/find-java.sh
export MAVEN_OPTS="--sun-misc-unsafe-memory-access=allow ${MAVEN_OPTS:-}"
build="${DS4J_DEVICE_BUILD:-target-device}"
out=.device
junit_version=1.14.4
modules=java.base,java.compiler,java.desktop,java.logging,java.management,java.naming,java.net.http,java.sql,java.xml,jdk.incubator.vector,jdk.jfr,jdk.management,jdk.unsupported,jdk.zipfs
mkdir -p "$out"

echo "== building (mvn package, $build)"
mvn -q -B package -DskipTests -Dbuild.dir="$build" -Dds4j.native=nvcc
unzip -Z1 "$build/ds4j.jar" native/linux-x86_64/libds4j_gpu.so >/dev/null 2>&1 || { echo "ds4j.jar has no GPU library (nvcc missing?)" >&2; exit 1; }

if [ ! -f "$out/rt.tar.xz" ] || [ "$(cat "$out/rt.modules" 2>/dev/null)" != "$modules" ]; then
  echo "== jlink runtime ($modules)"
  tmp="$(mktemp -d)"
  "$JAVA_HOME/bin/jlink" --add-modules "$modules" --strip-debug --no-header-files --no-man-pages --compress=zip-0 \
    --exclude-files='glob:/java.desktop/lib/*.so' --output "$tmp/rt"
  strip --strip-unneeded "$tmp/rt/lib/server/libjvm.so" "$tmp"/rt/lib/*.so 2>/dev/null || true
  tar -C "$tmp" -cf - rt | xz -T0 -9 > "$out/rt.tar.xz.tmp"
  mv "$out/rt.tar.xz.tmp" "$out/rt.tar.xz"
  echo "$modules" > "$out/rt.modules"
  rm -rf "$tmp"
fi

echo "== app bundle"
stage="$root/$build/device-stage"
rm -rf "$stage"
mkdir -p "$stage/app/lib"
cp "$build/ds4j.jar" "$stage/app/"
for j in "$build"/lib/*.jar; do
  case "$(basename "$j")" in
    tokenizers-*.jar)
      cp "$j" "$stage/app/lib/"
      zip -q -d "$stage/app/lib/$(basename "$j")" 'native/lib/osx-*' 'native/lib/win-*' 'native/lib/linux-aarch64/*' || true ;;
    # the cluster mode (gateway and engine nodes over Hazelcast) never runs on the one-GPU machine, and its 42 MB jar
    # would take the carried bundle past its limit: left out, with Vert.x's Hazelcast cluster manager (its service
    # entry would make every Vert.x start load Hazelcast classes); `ds4j serve --cluster ...` there fails to find them
    hazelcast-*.jar|vertx-hazelcast-*.jar) ;;
    *) cp "$j" "$stage/app/lib/" ;;
  esac
done
(cd "$build/test-classes" && find . -name '*.class' | sort > "$stage/classes.txt" && \
  "$JAVA_HOME/bin/jar" cf "$stage/app/tests.jar" @"$stage/classes.txt")
mvn -q -B dependency:copy -Dartifact=org.junit.platform:junit-platform-console-standalone:$junit_version \
  -DoutputDirectory="$stage/app" -Dmdep.stripVersion=true
mv "$stage/app/junit-platform-console-standalone.jar" "$stage/app/junit-console.jar"
# store the jars uncompressed (and drop JNA's natives for other platforms): xz then compresses the classes far
# better than the jars' own deflate does
for j in "$stage"/app/*.jar "$stage"/app/lib/*.jar; do
  x="$stage/x"; rm -rf "$x"; mkdir -p "$x"
  unzip -q -o "$j" -d "$x"
  case "$(basename "$j")" in jna-*.jar) find "$x/com/sun/jna" -mindepth 1 -maxdepth 1 -type d ! -name linux-x86-64 ! -name internal ! -name ptr ! -name win32 -exec rm -rf {} + ;; esac
  rm -f "$j"; (cd "$x" && zip -q -0 -r -X "$j" .)
done
rm -rf "$stage/x"
tar -C "$stage" -cf - app | xz -T0 -9 > "$out/app.tar.xz.tmp"
mv "$out/app.tar.xz.tmp" "$out/app.tar.xz"

total=$(du -cb "$out"/*.tar.xz | tail -1 | cut -f1)
ls -l "$out"
printf '== carried: %.1f MiB (limit 46)\n' "$(echo "$total / 1048576" | bc -l)"
[ "$total" -lt $((46 * 1048576)) ] || { echo "too large to carry" >&2; exit 1; }
