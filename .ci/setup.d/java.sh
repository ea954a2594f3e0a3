# The Java client (clients/java): JDK 17 and Maven from Debian, then every
# plugin and dependency its build and tests use resolved into the local
# Maven repository now, so that crates/monolock/tests/java_client.rs, the
# conformance suite's Java driver and the Java form of the fenced-postgres
# recipe run without reaching the network. The client itself has no runtime
# dependency; JUnit, ShedLock and the PostgreSQL driver are test and
# example dependencies. The tests make their PKI with the openssl command.
if ! command -v mvn >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then
    need_apt maven openjdk-17-jdk-headless
fi
command -v openssl >/dev/null 2>&1 || need_apt openssl
if command -v mvn >/dev/null 2>&1; then
    echo "setup: resolving the Java client's Maven dependencies"
    # A build that compiles everything and runs no test fetches the
    # compiler, jar and Surefire plugins (and Surefire's JUnit provider)
    # with every dependency; then the example's.
    (cd clients/java && mvn -q -B -DskipTests=false -Dtest=NoSuchTest -Dsurefire.failIfNoSpecifiedTests=false install) \
        || echo "setup: resolving the Java client's dependencies failed" >&2
    if [ -f examples/java/pom.xml ]; then
        (cd examples/java && mvn -q -B -Dtest=NoSuchTest -Dsurefire.failIfNoSpecifiedTests=false package) \
            || echo "setup: resolving the Java example's dependencies failed" >&2
    fi
fi
