"""A private ActiveMQ broker's files: its generated ``activemq.xml`` and logging configuration,
its data and log locations, and which transports the installed ActiveMQ has.

Nothing is read from ``/etc/activemq`` or ``/var/lib/activemq``: the broker's base directory
holds all of it. See :mod:`pumpd.testing.activemq`.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

from .node_errors import ActiveMQError
from .ports import LOCALHOST

__all__ = ["ACTIVEMQ_HOME", "ActiveMQFiles", "BrokerSettings", "activemq_xml",
           "has_transport"]

#: Debian's ``activemq`` package: ``bin/activemq.jar`` (the launcher) and ``lib/``.
ACTIVEMQ_HOME = Path("/usr/share/activemq")

# The launcher puts the jars of these directories of ACTIVEMQ_HOME on the class path.
_LIB_DIRS = ("lib", "lib/camel", "lib/optional", "lib/web", "lib/extra")

# log4j 1.2 (the logging Debian's ActiveMQ is built with): INFO and up to standard output,
# which the broker's process writes to its log file.
LOG4J_PROPERTIES = """\
log4j.rootLogger=INFO, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n
"""


@dataclass(frozen=True)
class ActiveMQFiles:
    """Where one broker's configuration, data and log are (:meth:`under` its base directory)."""

    base_dir: Path
    config_file: Path  # activemq.xml
    log4j_file: Path  # log4j.properties
    data_dir: Path  # activemq.data: the broker's dataDirectory
    kahadb_dir: Path  # the persistent store
    tmp_dir: Path  # the JVM's java.io.tmpdir
    log_file: Path  # the JVM's standard output and error: the broker's log

    @classmethod
    def under(cls, base_dir: Path) -> ActiveMQFiles:
        data_dir = base_dir / "data"
        return cls(
            base_dir=base_dir,
            config_file=base_dir / "activemq.xml",
            log4j_file=base_dir / "log4j.properties",
            data_dir=data_dir,
            kahadb_dir=data_dir / "kahadb",
            tmp_dir=base_dir / "tmp",
            log_file=base_dir / "activemq.log",
        )

    def write(self, config: str) -> None:
        """Write ``activemq.xml`` and the logging configuration, making the directories."""
        for d in (self.base_dir, self.data_dir, self.tmp_dir):
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ActiveMQError(f"cannot create {d}: {exc}") from exc
        self.config_file.write_text(config)
        self.log4j_file.write_text(LOG4J_PROPERTIES)


@dataclass(frozen=True)
class BrokerSettings:
    """What goes into a broker's ``activemq.xml``."""

    broker_name: str
    files: ActiveMQFiles
    stomp_port: int
    #: The AMQP connector's port; ``None``: no AMQP connector.
    amqp_port: int | None
    #: How the AMQP connector stores an AMQP message: ``native`` keeps its encoded sections
    #: as they came (an AMQP consumer gets them back; a redelivery re-encodes the header
    #: with the new delivery-count), ``jms`` maps them onto a JMS message (application
    #: properties and annotations become JMS properties).
    amqp_transformer: str
    user: str
    password: str
    anonymous: bool
    memory_limit_mb: int


def activemq_xml(s: BrokerSettings) -> str:
    """The broker's ``activemq.xml``: only what the tests need.

    * no JMX, no advisory topics, no scheduler, no web console, no OpenWire connector: each
      costs start time, threads or ports and nothing here uses them;
    * a STOMP connector (the tests' inspection channel) and, when given, an AMQP one, both on
      127.0.0.1;
    * KahaDB in its own directory: a persistent message that the broker acknowledged is in
      its journal (synced on every write, KahaDB's default), so it survives a SIGKILL;
    * users by ``simpleAuthenticationPlugin`` (no JAAS file), anonymous access as asked;
    * memory, store and temporary-store limits sized for a test machine;
    * queue browsers that see a whole queue (ActiveMQ's default stops at 400 messages), so
      a browse counts every message.
    """
    connectors = [f'<transportConnector name="stomp" uri="stomp://{LOCALHOST}:{s.stomp_port}"/>']
    if s.amqp_port is not None:
        if s.amqp_transformer not in ("native", "jms"):
            raise ActiveMQError(f"amqp_transformer {s.amqp_transformer!r}: expected 'native' "
                                "or 'jms'")
        uri = f"amqp://{LOCALHOST}:{s.amqp_port}?transport.transformer={s.amqp_transformer}"
        connectors.append(f"<transportConnector name=\"amqp\" uri={quoteattr(uri)}/>")
    connector_lines = "\n      ".join(connectors)
    f = s.files
    return f"""\
<beans xmlns="http://www.springframework.org/schema/beans"
       xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
       xsi:schemaLocation="http://www.springframework.org/schema/beans
         http://www.springframework.org/schema/beans/spring-beans.xsd
         http://activemq.apache.org/schema/core
         http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core"
          brokerName={quoteattr(s.broker_name)}
          dataDirectory={quoteattr(str(f.data_dir))}
          persistent="true" useJmx="false" advisorySupport="false" schedulerSupport="false"
          useShutdownHook="true">
    <destinationPolicy>
      <policyMap>
        <policyEntries>
          <policyEntry queue="&gt;" maxBrowsePageSize="1000000"/>
        </policyEntries>
      </policyMap>
    </destinationPolicy>
    <plugins>
      <simpleAuthenticationPlugin anonymousAccessAllowed="{str(s.anonymous).lower()}">
        <users>
          <authenticationUser username={quoteattr(s.user)} password={quoteattr(s.password)}
                              groups="users"/>
        </users>
      </simpleAuthenticationPlugin>
    </plugins>
    <persistenceAdapter>
      <kahaDB directory={quoteattr(str(f.kahadb_dir))} journalMaxFileLength="8mb"/>
    </persistenceAdapter>
    <systemUsage>
      <systemUsage>
        <memoryUsage><memoryUsage limit="{s.memory_limit_mb} mb"/></memoryUsage>
        <storeUsage><storeUsage limit="2 gb"/></storeUsage>
        <tempUsage><tempUsage limit="1 gb"/></tempUsage>
      </systemUsage>
    </systemUsage>
    <transportConnectors>
      {connector_lines}
    </transportConnectors>
  </broker>
</beans>
"""


def has_transport(home: Path, scheme: str) -> bool:
    """Whether the ActiveMQ at ``home`` can open ``scheme://`` connectors: a jar on its class
    path registers a transport factory for it.

    Debian's ``activemq`` 5.17 has no ``amqp`` transport: its build leaves the
    ``activemq-amqp`` module out (it needs Qpid Proton-J, which Debian does not package).
    """
    entry = f"META-INF/services/org/apache/activemq/transport/{scheme}"
    for lib in _LIB_DIRS:
        for jar in sorted((home / lib).glob("*.jar")):
            try:
                with zipfile.ZipFile(jar) as z:
                    z.getinfo(entry)
                    return True
            except (KeyError, OSError, zipfile.BadZipFile):
                continue
    return False
