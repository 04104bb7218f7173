# Sourced by the scripts in bin/: sets JAVA_HOME to a JDK >= 25 or exits with a message saying what to install.
java_major() { "$1/bin/java" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p' | head -1; }
pick=""
for cand in "${JAVA_HOME:-}" /usr/lib/jvm/temurin-25-jdk-amd64 /usr/lib/jvm/temurin-2[5-9]* /usr/lib/jvm/java-2[5-9]* /usr/lib/jvm/jdk-2[5-9]* \
            "$(dirname "$(dirname "$(readlink -f "$(command -v java 2>/dev/null || echo /nonexistent)")")")"; do
  [ -n "$cand" ] && [ -x "$cand/bin/java" ] || continue
  v="$(java_major "$cand")"
  if [ -n "$v" ] && [ "${v%%.*}" -ge 25 ] 2>/dev/null; then pick="$cand"; break; fi
done
if [ -z "$pick" ]; then
  echo "ds4j needs a JDK 25 or newer (Temurin 25 recommended); none found in JAVA_HOME, /usr/lib/jvm or on PATH." >&2
  exit 1
fi
export JAVA_HOME="$pick"
export PATH="$JAVA_HOME/bin:$PATH"
