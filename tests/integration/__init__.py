"""Tests against private RabbitMQ nodes, Spark, real daemons and package builds."""
