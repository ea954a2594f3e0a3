# monolock-bench's side-by-side scenarios run the lock services users would
# pick instead: a single etcd member (Debian's etcd-server) and a standalone
# ZooKeeper (zookeeperd). The bench starts its own instances on loopback with
# their data on tmpfs; the Debian services stay stopped (in containers
# policy-rc.d already refuses to start them). The etcd-client crate compiles
# etcd's .proto files when it is built, with protoc and the well-known
# types of libprotobuf-dev.
need_apt etcd-server zookeeperd protobuf-compiler libprotobuf-dev
