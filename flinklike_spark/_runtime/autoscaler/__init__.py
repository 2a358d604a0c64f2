"""The autoscaler of the adaptive scheduler (FLIP-271): metrics, decisions, their application."""
