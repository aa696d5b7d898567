# contrib/model: Promela models checked with spin
