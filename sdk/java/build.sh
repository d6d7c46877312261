#!/usr/bin/env bash
# Builds the Java SDK with plain javac/jar (no Maven: no repository is reachable), for JDK 8+:
#   sdk/java/build.sh          -> sdk/java/build/molens-client.jar (javac --release 8: build on JDK 9+, runs on 8+)
#   sdk/java/build.sh test     -> also compiles the JUnit 4 tests and runs them (they need the nodes
#                                 tests/integration/test_sdk_java.py starts; see NodeEnv.java)
# Jars come from Debian: libjackson2-databind-java, junit4 (scripts/test installs them).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${MOLENS_JAVA_BUILD:-$here/build}
jars=/usr/share/java
cp_main="$jars/jackson-databind.jar:$jars/jackson-core.jar:$jars/jackson-annotations.jar"
cp_test="$cp_main:$jars/junit4.jar:$jars/hamcrest-core.jar"
for j in ${cp_test//:/ }; do
    [[ -f $j ]] || { echo "build.sh: $j is missing (apt-get install libjackson2-databind-java junit4)" >&2; exit 1; }
done
rm -rf "$out/classes" "$out/test-classes"
mkdir -p "$out/classes" "$out/test-classes"
javac --release 8 -Xlint:all -Xlint:-options -Werror -encoding UTF-8 -cp "$cp_main" -d "$out/classes" \
    $(find "$here/src/main/java" -name '*.java' | sort)
jar cf "$out/molens-client.jar" -C "$out/classes" .
echo "build.sh: $out/molens-client.jar"
if [[ ${1:-} == test ]]; then
    javac --release 8 -Xlint:all -Xlint:-options -encoding UTF-8 -cp "$out/molens-client.jar:$cp_test" -d "$out/test-classes" \
        $(find "$here/src/test/java" -name '*.java' | sort)
    classes=$(cd "$here/src/test/java" && find . -name '*Test.java' | sed 's|^\./||; s|\.java$||; s|/|.|g' | sort)
    exec java -cp "$out/test-classes:$out/molens-client.jar:$cp_test" org.junit.runner.JUnitCore $classes
fi
