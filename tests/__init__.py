"""pumpd's tests, in two lanes.

* ``tests/unit``: no broker, no Spark JVM, no running daemon; ``make test-fast`` runs it.
* ``tests/integration``: everything that needs one of those (private RabbitMQ nodes, a
  SparkSession, a ``pumpd`` daemon, a package build); ``make test`` runs both lanes.
* ``tests/support``: helpers both lanes import as ``tests.support.<module>``.

``tests`` is a package so that a helper is imported by its full name, and two test modules of
the same name in two lanes do not collide: pytest puts the directory above the top package
(the repository) on the import path, the same for ``pytest`` run from anywhere in the checkout.
"""
