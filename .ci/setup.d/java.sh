# The Java client (clients/java): JDK 17 and Maven from Debian, then every
# plugin and dependency its build and tests use resolved into the local
# Maven repository now, so that crates/monolock/tests/java_client.rs, the
# conformance suite's Java driver and the Java form of the fenced-postgres
# recipe (examples/java, a module of the same reactor) run without reaching
# the network. The client itself has no runtime dependency; JUnit, ShedLock
# and the PostgreSQL JDBC driver are test and example dependencies. The
# tests make their PKI with the openssl command.
if ! command -v mvn >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then
    need_apt maven openjdk-17-jdk-headless
fi
command -v openssl >/dev/null 2>&1 || need_apt openssl
if command -v mvn >/dev/null 2>&1; then
    echo "setup: resolving the Java client's Maven dependencies"
    # A build of every module that runs no test still fetches the compiler,
    # jar, dependency and Surefire plugins (with Surefire's JUnit provider)
    # and every dependency.
    (cd clients/java && mvn -q -B -Dtest=NoSuchTest -Dsurefire.failIfNoSpecifiedTests=false install) \
        || echo "setup: resolving the Java client's dependencies failed" >&2
fi
